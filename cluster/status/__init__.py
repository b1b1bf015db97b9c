"""What happened to the machines: each node's status history and the alert episodes raised on nodes,
GPUs and jobs."""
