"""The ibverbs constants the soft device understands, with the values of ``<infiniband/verbs.h>``.

The names and values match ``pyverbs.enums`` (rdma-core 44), so code written against pyverbs reads
them from either module; ``tests/transport/verbs/test_pyverbs_api.py`` checks every value against
the installed pyverbs.
"""

from __future__ import annotations

# enum ibv_access_flags
IBV_ACCESS_LOCAL_WRITE = 1
IBV_ACCESS_REMOTE_WRITE = 2
IBV_ACCESS_REMOTE_READ = 4

# enum ibv_qp_state
IBV_QPS_RESET = 0
IBV_QPS_INIT = 1
IBV_QPS_RTR = 2
IBV_QPS_RTS = 3
IBV_QPS_SQD = 4
IBV_QPS_SQE = 5
IBV_QPS_ERR = 6

# enum ibv_qp_type
IBV_QPT_RC = 2
IBV_QPT_UD = 4

# enum ibv_wr_opcode
IBV_WR_RDMA_WRITE = 0
IBV_WR_RDMA_WRITE_WITH_IMM = 1
IBV_WR_SEND = 2
IBV_WR_RDMA_READ = 4

# enum ibv_send_flags
IBV_SEND_SIGNALED = 2

# enum ibv_wc_status
IBV_WC_SUCCESS = 0
IBV_WC_LOC_LEN_ERR = 1
IBV_WC_LOC_QP_OP_ERR = 2
IBV_WC_LOC_PROT_ERR = 4
IBV_WC_WR_FLUSH_ERR = 5
IBV_WC_REM_INV_REQ_ERR = 9
IBV_WC_REM_ACCESS_ERR = 10
IBV_WC_REM_OP_ERR = 11
IBV_WC_RETRY_EXC_ERR = 12
IBV_WC_RNR_RETRY_EXC_ERR = 13
IBV_WC_GENERAL_ERR = 21

# enum ibv_wc_opcode
IBV_WC_RDMA_WRITE = 1
IBV_WC_RDMA_READ = 2
IBV_WC_RECV = 128
IBV_WC_RECV_RDMA_WITH_IMM = 129

# enum ibv_wc_flags
IBV_WC_WITH_IMM = 2

# enum ibv_qp_attr_mask
IBV_QP_STATE = 1
IBV_QP_ACCESS_FLAGS = 8
IBV_QP_PKEY_INDEX = 16
IBV_QP_PORT = 32
IBV_QP_AV = 128
IBV_QP_PATH_MTU = 256
IBV_QP_TIMEOUT = 512
IBV_QP_RETRY_CNT = 1024
IBV_QP_RNR_RETRY = 2048
IBV_QP_RQ_PSN = 4096
IBV_QP_MAX_QP_RD_ATOMIC = 8192
IBV_QP_MIN_RNR_TIMER = 32768
IBV_QP_SQ_PSN = 65536
IBV_QP_MAX_DEST_RD_ATOMIC = 131072
IBV_QP_CAP = 524288
IBV_QP_DEST_QPN = 1048576

# enum ibv_mtu
IBV_MTU_1024 = 3
IBV_MTU_4096 = 5

# enum ibv_port_state
IBV_PORT_ACTIVE = 4

# link layers
IBV_LINK_LAYER_INFINIBAND = 1
IBV_LINK_LAYER_ETHERNET = 2
