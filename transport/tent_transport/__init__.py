"""I/O transports (TCP, pyverbs RDMA) that pump the sans-IO credit and scheduling objects."""
