"""jax.distributed: two processes on this machine (tests/programs/two_processes.py, plain JAX), run as `python` and
under `tinyjax run`: the same output in each process. JAX computes what spans both processes (a collective over its
own transport), which the report says and counts as XLA's; each process's own work runs on tinygrad."""
import os
import re
import socket
import subprocess
import sys

import pytest

PROGRAM = os.path.join(os.path.dirname(__file__), "programs", "two_processes.py")


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def _two_processes(command: list) -> list:
  """Both processes' CompletedProcess, started together."""
  port = _free_port()
  # block-buffered stdout: PYTHONUNBUFFERED makes each piece of a print its own write, which gloo's lines, written
  # from its own threads, can split (CI saw "devices" lost so); a buffer's one write to a pipe stays whole
  env = {**{k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}, "JAX_NUM_CPU_DEVICES": "2",
         "JAX_PLATFORMS": "cpu"}
  started = [subprocess.Popen([*command, PROGRAM, str(i), str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for i in range(2)]
  done = []
  for process in started:
    stdout, stderr = process.communicate(timeout=300)
    done.append(subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr))
  return done


def _printed(stdout: str) -> list:
  """The program's lines, among gloo's own (it prints its connections to the same stdout); each line the program prints
  starts with a word of its own."""
  return re.findall(r"(?:devices|psum|own) .*", stdout)


def test_two_processes_give_jaxs_results():
  device = os.environ.get("TINYJAX_DEVICE", "CPU")
  expected = _two_processes([sys.executable])
  actual = _two_processes([sys.executable, "-m", "tinyjax.cli.main", "run", "--device", device, "--report"])
  for want, got in zip(expected, actual):
    assert want.returncode == 0, want.stderr[-2000:]
    assert got.returncode == 0, got.stderr[-2000:]
    assert _printed(got.stdout) == _printed(want.stdout) and len(_printed(want.stdout)) == 3
    assert "run by JAX itself" in got.stderr and "<lambda> x1" in got.stderr, got.stderr[-2000:]
    # the collective's call is JAX's (its inputs span both processes): one run on XLA, the rest native
    native, total = map(int, re.search(r"(\d+) of (\d+) equation runs native", got.stderr).groups())
    assert total - native == 1 and native > 0, got.stderr[-2000:]
