"""The `tinyjax` command line: every command and error path, in process with typer's CliRunner and as real
subprocesses (exit codes, sys.argv, tracebacks, what reaches stdout and stderr)."""
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from tinyjax import coverage as coverage_table
from tinyjax.cli.main import app

runner = CliRunner()
COMMANDS = ("devices", "run", "coverage", "doctor", "export")

# a script that shows what it was given, and exits with the code given as its first argument
SHOW_ARGV = """
import os, sys
print("argv:", sys.argv)
print("name:", __name__)
names = ("TINYJAX_BACKEND", "TINYJAX_DEVICE", "TINYJAX_FALLBACK", "DEV", "BEAM", "DEBUG")
print("env:", {k: os.environ.get(k) for k in names})
if len(sys.argv) > 1 and sys.argv[1].isdigit():
  sys.exit(int(sys.argv[1]))
"""
RAISES = """
def helper():
  raise ValueError("bad value from the script")

helper()
"""
# computes on the backend in effect, so the report has something to show
COMPUTES = """
import numpy as np
import tinyjax.numpy as jnp
x = jnp.asarray(np.arange(4, dtype=np.float32))
print("result:", [round(float(v), 3) for v in np.asarray(jnp.sin(x) * 2 + 1)])
"""


@pytest.fixture
def script(tmp_path):
  def write(source: str, name: str = "script.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return str(path)
  return write


def lists_available_cpu(message: str) -> bool:
  """The error lists the devices that work, CPU among them (CL and WEBGPU too where their runtimes are installed)."""
  return re.search(r"available: [A-Z, ]*\bCPU\b", message) is not None


def invoke(*args, env=None):
  return runner.invoke(app, list(args), env=env)


# --- the app and help

def test_no_arguments_shows_help():
  result = invoke()
  assert "Usage" in result.output and all(c in result.output for c in COMMANDS)


def test_version():
  result = invoke("--version")
  assert result.exit_code == 0 and result.output.startswith("tinyjax ")


@pytest.mark.parametrize("command", COMMANDS)
def test_help_has_examples(command):
  result = invoke(command, "--help")
  assert result.exit_code == 0
  assert "Examples" in result.output and f"tinyjax {command}" in result.output


def test_shell_completion_script(monkeypatch):
  # NB: typer finds the user's shell among the process's ancestors (shellingham), and a test run may have none
  monkeypatch.setattr("shellingham.detect_shell", lambda: ("bash", "/bin/bash"))
  result = invoke("--show-completion")
  assert result.exit_code == 0 and "_TINYJAX_COMPLETE" in result.output, (result.output, repr(result.exception))


# --- devices

@pytest.fixture(scope="module")
def devices_text():
  return invoke("devices")


@pytest.fixture(scope="module")
def devices_json():
  return invoke("devices", "--json", env={"TINYJAX_DEVICE": "PYTHON"})


def test_devices_lists_every_tinygrad_device_and_xla(devices_text):
  from tinygrad.device import ALL_DEVICES
  assert devices_text.exit_code == 0
  lines = devices_text.output.splitlines()
  for name in [*ALL_DEVICES, "PYTHON", "cpu:0"]:
    assert any(line[2:].split()[:1] == [name] for line in lines), name
  assert any(line.startswith("* CPU ") and "available" in line and "renderer CLANG" in line for line in lines)


def test_devices_json_gives_reasons_and_marks_the_device_in_use(devices_json):
  assert devices_json.exit_code == 0
  infos = json.loads(devices_json.stdout)
  by_name = {(i["backend"], i["name"]): i for i in infos}
  assert by_name["tinygrad", "CPU"]["available"] and by_name["tinygrad", "CPU"]["renderers"]["CLANG"] == "ok"
  assert by_name["xla", "cpu:0"]["available"]
  assert [i["name"] for i in infos if i["default"]] == ["PYTHON"]
  for info in infos:
    if not info["available"]:
      assert info["reason"] and info["kind"] in ("missing library", "no compiler", "no GPU", "disabled", "error"), info


def test_devices_bad_setting_is_a_short_error():
  result = invoke("devices", env={"TINYJAX_BACKEND": "torch"})
  assert result.exit_code == 2
  assert "TINYJAX_BACKEND='torch'" in result.stderr and "Traceback" not in result.output


# --- coverage

def test_coverage_table_comes_from_the_rule_tables():
  result = invoke("coverage")
  assert result.exit_code == 0
  rows = coverage_table.rows()
  native = sum(r.status == "native" for r in rows)
  assert result.output.startswith(f"{native} native")
  for row in rows:
    assert any(line.split()[:2] == [row.primitive, row.status] for line in result.output.splitlines()), row


def test_coverage_markdown_is_the_generated_document():
  result = invoke("coverage", "--markdown")
  assert result.exit_code == 0 and result.stdout == coverage_table.markdown()


def test_coverage_json():
  primitives = json.loads(invoke("coverage", "--json").stdout)["primitives"]
  assert {p["primitive"]: p["tinygrad"] for p in primitives} == {r.primitive: r.status for r in coverage_table.rows()}
  assert {p["xla"] for p in primitives} == {"native"}


def test_coverage_device_shows_dtype_support():
  result = invoke("coverage", "--device", "CLANG")
  assert result.exit_code == 0
  assert "dtypes on tinygrad CPU:" in result.output
  assert "  float32   computes" in result.output and "  bfloat16  computes" in result.output


def test_coverage_unknown_device():
  result = invoke("coverage", "--device", "NOSUCH")
  assert result.exit_code == 2
  assert "'NOSUCH'" in result.stderr and lists_available_cpu(result.stderr) and "Traceback" not in result.output


# --- doctor

def test_doctor_shows_versions_compiler_cache_and_settings():
  import jax
  import tinygrad.helpers
  result = invoke("doctor", env={"TINYJAX_FALLBACK": "warn", "BEAM": None})
  assert result.exit_code == 0
  out = result.output
  assert f"jax        {jax.__version__}" in out and "jaxlib " in out and "tinygrad   0.14.0" in out
  assert f"python     CPython {sys.version.split()[0]}" in out
  assert "C compiler:" in out and "clang" in out
  assert tinygrad.helpers.CACHEDB in out
  assert any(line.split() == ["TINYJAX_FALLBACK", "warn", "environment"] for line in out.splitlines())
  assert any(line.split() == ["TINYJAX_BACKEND", "tinygrad", "default"] for line in out.splitlines())


def test_doctor_json():
  found = json.loads(invoke("doctor", "--json").stdout)
  assert found["versions"]["tinygrad"] == "0.14.0"
  assert found["runs on"]["backend"] == "tinygrad" and found["runs on"]["device"] == "CPU"
  assert set(found["settings"]) == {"tinyjax", "tinygrad", "jax"}


def test_doctor_reports_a_broken_setting_instead_of_failing():
  result = invoke("doctor", env={"TINYJAX_DEVICE": "NOSUCH"})
  assert result.exit_code == 0 and "problem" in result.output and "'NOSUCH'" in result.output


# --- run, in process

def test_run_argv_name_and_exit_code(script):
  path = script(SHOW_ARGV)
  result = invoke("run", path, "3", "a", "-x", "--lr=0.1")
  assert result.exit_code == 3
  assert f"argv: {[path, '3', 'a', '-x', '--lr=0.1']}" in result.output and "name: __main__" in result.output


@pytest.mark.parametrize("args", [
  ("--device", "CPU", "{script}", "a", "b"),
  ("{script}", "--device", "CPU", "a", "b"),
  ("{script}", "a", "--device", "CPU", "b"),
], ids=["before", "after", "between"])
def test_run_options_before_or_after_the_script(script, args):
  path = script(SHOW_ARGV)
  result = invoke("run", *(a.format(script=path) for a in args))
  assert result.exit_code == 0, result.output
  assert f"argv: {[path, 'a', 'b']}" in result.output and "'TINYJAX_DEVICE': 'CPU'" in result.output


def test_run_after_double_dash_everything_goes_to_the_script(script):
  path = script(SHOW_ARGV)
  result = invoke("run", path, "--", "--device", "x", "--report", env={"TINYJAX_DEVICE": None})
  assert result.exit_code == 0
  assert f"argv: {[path, '--device', 'x', '--report']}" in result.output and "'TINYJAX_DEVICE': None" in result.output


def test_run_sets_the_environment_and_restores_it(script):
  path = script(SHOW_ARGV)
  before = dict(os.environ)
  result = invoke("run", "--device", "CLANG", "--fallback", "warn", "--beam", "0", "--debug", "0", path)
  assert result.exit_code == 0, result.output
  assert ("env: {'TINYJAX_BACKEND': None, 'TINYJAX_DEVICE': 'CPU', 'TINYJAX_FALLBACK': 'warn', 'DEV': 'CPU', "
          "'BEAM': '0', 'DEBUG': '0'}") in result.output
  assert dict(os.environ) == before


def test_run_exception_prints_the_scripts_traceback_only(script):
  path = script(RAISES)
  result = invoke("run", path)
  assert result.exit_code == 1
  assert "Traceback (most recent call last)" in result.stderr
  assert "ValueError: bad value from the script" in result.stderr
  assert 'in helper\n    raise ValueError("bad value from the script")' in result.stderr
  assert "runpy" not in result.stderr and "tinyjax/cli" not in result.stderr and "typer" not in result.stderr


def test_run_sys_exit_with_a_message(script):
  result = invoke("run", script("import sys\nsys.exit('stopped: no data')\n"))
  assert result.exit_code == 1 and "stopped: no data" in result.stderr


def test_run_module(script, monkeypatch):
  script(SHOW_ARGV, name="shows_argv.py")
  monkeypatch.chdir(os.path.dirname(script("", name="unused.py")))
  result = invoke("run", "-m", "shows_argv", "4", "--device", "CPU", "x")
  assert result.exit_code == 4, result.output
  assert "shows_argv.py', '4', 'x']" in result.output and "name: __main__" in result.output


@pytest.mark.parametrize("args, message", [
  (("--device", "NOSUCH", "{script}"), "tinygrad device 'NOSUCH' is not available here"),
  (("--backend", "xla", "--device", "tpu", "{script}"), "XLA has no device 'tpu'; available: cpu:0"),
  (("missing.py",), "can't open file 'missing.py'"),
  (("--devcie", "CPU", "{script}"), "no such option: --devcie"),
  (("-m", "no_such_module_here"), "no module named 'no_such_module_here'"),
  ((), "give a SCRIPT to run or -m MODULE"),
], ids=["device", "xla-device", "script", "option", "module", "nothing"])
def test_run_refusals_are_short(script, args, message):
  path = script(SHOW_ARGV)
  result = invoke("run", *(a.format(script=path) for a in args))
  assert result.exit_code == 2
  assert result.stderr.startswith("tinyjax run: ") and message in result.stderr
  assert "Traceback" not in result.output and "argv:" not in result.output


def test_run_unknown_device_lists_the_available_ones(script):
  result = invoke("run", "--device", "NOSUCH", script(SHOW_ARGV))
  assert lists_available_cpu(result.stderr) and result.stderr.count("\n") == 1


def test_run_bad_choice_is_a_usage_error(script):
  result = invoke("run", "--backend", "torch", script(SHOW_ARGV))
  assert result.exit_code == 2 and "torch" in result.output


def test_run_report_at_exit_even_after_sys_exit(script):
  path = script(COMPUTES + "import sys\nsys.exit(5)\n")
  result = invoke("run", path, "--report")
  assert result.exit_code == 5
  assert "result: [1.0, 2.683, 2.819, 1.282]" in result.stdout
  assert result.stderr.startswith("tinyjax report: ") and "flushes" in result.stderr
  assert "bytes crossed between backends" in result.stderr and "sin" in result.stderr


def test_run_on_xla(script):
  result = invoke("run", "--backend", "xla", "--report", script(COMPUTES))
  assert result.exit_code == 0, result.output
  assert "result: [1.0, 2.683, 2.819, 1.282]" in result.stdout
  assert "tinygrad" not in result.stderr and "xla" in result.stderr.splitlines()[1]


# --- run, as a real process: all started at once, since each pays for importing JAX and tinygrad

PROCESS_CASES = {
  "argv": ("run", "{dir}/show_argv.py", "--device", "CLANG", "a", "--", "--device", "b"),
  "exit": ("run", "{dir}/show_argv.py", "3"),
  "raises": ("run", "{dir}/raises.py"),
  "module": ("run", "-m", "show_argv", "7", "y"),
  "device": ("run", "--device", "NOSUCH", "{dir}/show_argv.py"),
  "missing": ("run", "missing.py"),
  "report": ("run", "--device", "CLANG", "--report", "{dir}/computes.py"),
  "xla": ("run", "--backend", "xla", "--report", "{dir}/computes.py"),
  "profile": ("run", "--device", "CLANG", "--profile", "profile.json.gz", "{dir}/computes.py"),
}


@pytest.fixture(scope="module")
def processes(tmp_path_factory):
  """`python -m tinyjax.cli.main ARGS` for each case, run in the scripts' directory."""
  directory = tmp_path_factory.mktemp("scripts")
  for name, source in {"show_argv.py": SHOW_ARGV, "raises.py": RAISES, "computes.py": COMPUTES}.items():
    (directory / name).write_text(textwrap.dedent(source))
  started = {case: subprocess.Popen(
    [sys.executable, "-m", "tinyjax.cli.main", *(a.format(dir=directory) for a in args)],
    cwd=directory, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for case, args in PROCESS_CASES.items()}
  finished = {}
  for case, process in started.items():
    stdout, stderr = process.communicate(timeout=300)
    finished[case] = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
  return directory, finished


def test_process_exit_codes_and_argv(processes):
  directory, done = processes
  assert done["argv"].returncode == 0, done["argv"].stderr
  assert f"argv: {[str(directory / 'show_argv.py'), 'a', '--device', 'b']}" in done["argv"].stdout
  assert "'TINYJAX_DEVICE': 'CPU'" in done["argv"].stdout and "'DEV': 'CPU'" in done["argv"].stdout
  assert done["exit"].returncode == 3 and done["exit"].stderr == ""


def test_process_exception_traceback(processes):
  directory, done = processes
  path, stderr = str(directory / "raises.py"), done["raises"].stderr
  assert done["raises"].returncode == 1
  assert stderr.startswith("Traceback (most recent call last):\n" f'  File "{path}", line 5, in <module>')
  assert stderr.rstrip().endswith("ValueError: bad value from the script")
  assert "runpy" not in stderr and "tinyjax" not in stderr.replace(path, "")


def test_process_module(processes):
  directory, done = processes
  assert done["module"].returncode == 7, done["module"].stderr
  assert f"argv: {[str(directory / 'show_argv.py'), '7', 'y']}" in done["module"].stdout


def test_process_refusals(processes):
  _, done = processes
  device, missing = done["device"], done["missing"]
  assert device.returncode == 2 and device.stdout == ""
  assert device.stderr.startswith("tinyjax run: tinygrad device 'NOSUCH'") and lists_available_cpu(device.stderr)
  assert missing.returncode == 2 and missing.stderr == "tinyjax run: can't open file 'missing.py': no such file\n"


def test_process_report_on_tinygrad(processes):
  _, done = processes
  assert done["report"].returncode == 0, done["report"].stderr
  assert "result: [1.0, 2.683, 2.819, 1.282]" in done["report"].stdout
  lines = done["report"].stderr.splitlines()
  assert lines[0].startswith("tinyjax report: ") and "tinygrad" in lines[1]
  assert any(line.split()[:2] == ["sin", "1"] for line in lines)


def test_process_report_on_xla(processes):
  _, done = processes
  assert done["xla"].returncode == 0, done["xla"].stderr
  assert "result: [1.0, 2.683, 2.819, 1.282]" in done["xla"].stdout
  assert "tinygrad" not in done["xla"].stderr and "xla" in done["xla"].stderr.splitlines()[1]


def test_process_profile(processes):
  """`--profile` writes the run's trace (tests/test_profile.py reads one in detail), relative to the working
  directory."""
  import gzip
  directory, done = processes
  assert done["profile"].returncode == 0, done["profile"].stderr
  assert "tinyjax run: profile written to profile.json.gz" in done["profile"].stderr
  with gzip.open(directory / "profile.json.gz", "rt") as file:
    events = json.load(file)["traceEvents"]
  assert {e["name"] for e in events if e.get("cat") == "program"} == {"compile program", "run program"}
  assert {e["args"]["device"] for e in events if e.get("cat") == "run"} == {"CPU"}


def test_run_hides_tinyjax_frames_of_an_error_raised_inside_tinyjax(script):
  path = script("import tinyjax\n\ntinyjax.config.update('no_such_setting', 1)\n")
  result = invoke("run", path)
  assert result.exit_code == 1
  assert f'File "{path}", line 3, in <module>' in result.stderr
  assert "ValueError: unknown tinyjax setting 'no_such_setting'" in result.stderr
  assert "config.py" not in result.stderr and "tinyjax/" not in result.stderr.replace(path, "")


def test_run_chained_exceptions_keep_both_tracebacks(script):
  path = script("""
    try:
      {}["key"]
    except KeyError as error:
      raise RuntimeError("lookup failed") from error
  """)
  result = invoke("run", path)
  assert result.exit_code == 1
  assert "KeyError: 'key'" in result.stderr and "direct cause of the following exception" in result.stderr
  assert result.stderr.count(f'File "{path}"') == 2 and "runpy" not in result.stderr


def test_reference_documents_every_command_and_option():
  import pathlib
  import typer.main
  reference = (pathlib.Path(__file__).parent.parent / "docs" / "cli.md").read_text()
  group = typer.main.get_command(app)
  for name, command in group.commands.items():
    assert f"## `tinyjax {name}`" in reference and f"$ tinyjax {name}" in reference, name
    for param in command.params:
      for option in param.opts:
        assert option in reference or not option.startswith("-"), (name, option)


def test_help_imports_no_tinygrad():
  """`tinyjax --help` answers without importing tinygrad (nor opening a device)."""
  code = ("import sys; sys.argv = ['tinyjax', '--help']\nfrom tinyjax.cli.main import app\ntry:\n  app()\n"
          "except SystemExit:\n  pass\nprint(sorted(m for m in sys.modules if m.split('.')[0] == 'tinygrad'))")
  result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout[-2000:]
