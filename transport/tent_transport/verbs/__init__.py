"""RDMA verbs: the verbs Device over the pyverbs API, the soft RC device for tests, the probe."""
