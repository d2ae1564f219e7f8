"""train.py without frexport.agent: PyTorch's own worker server on $SOCKETS_DIR/rank-<RANK>.sock, as
`torch.distributed.elastic.control_plane.worker_main` starts it from TORCH_WORKER_SERVER_SOCKET (one
path per rank), with PyTorch's handlers only."""

import os
import runpy

import torch

socket = os.path.join(os.environ["SOCKETS_DIR"], f"rank-{os.environ['RANK']}.sock")
server = torch._C._distributed_c10d._WorkerServer(socket)
runpy.run_path(os.path.join(os.path.dirname(__file__), "train.py"), run_name="__main__")
