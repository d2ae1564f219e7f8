"""train_hooked_async.py without frexport.agent: PyTorch's own worker server on
$SOCKETS_DIR/rank-<RANK>.sock (as train_worker_server.py starts it), PyTorch's handlers only."""

import os
import runpy

import torch

socket = os.path.join(os.environ["SOCKETS_DIR"], f"rank-{os.environ['RANK']}.sock")
server = torch._C._distributed_c10d._WorkerServer(socket)
runpy.run_path(os.path.join(os.path.dirname(__file__), "train_hooked_async.py"), run_name="__main__")
