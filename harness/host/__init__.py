"""The host a measurement ran on, as part of its result: state.py."""
