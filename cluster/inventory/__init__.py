"""The machines: nodes, GPUs and MIG instances, GPU models and their aliases, node registration and agent
tokens, the inventory and node pages and API."""
