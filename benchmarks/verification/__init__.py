"""Verification harnesses: the verifier's throughput and its agreement with other graders' labelled cases."""
