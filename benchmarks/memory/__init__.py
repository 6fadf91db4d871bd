"""Memory harnesses: the memory plan against measured bytes and RSS, the RM's memory settings and options."""
