"""What every backend shares to serve: the tensor contract, Triton model configs, processes, ports,
the tritonserver binary, client probes, and the one launch loop (spawn, ready, warm up, record, stop).

Modules are imported where needed (no imports here), so `import harness.serving.ports` stays light.
"""
