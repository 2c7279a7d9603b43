"""dispatch notebook's pure part: the job's command line and where JupyterLab's URL is in its log."""

import pytest

from dispatcher.cli.notebook import LAUNCHER, command_line, find_url, lab_url
from dispatcher.core.errors import InvalidRequestError

#: What JupyterLab 4 (jupyter_server 2) writes as it starts, the token masked (it came from JUPYTER_TOKEN).
STARTING = """\
[I 2026-12-03 07:42:13.628 LabApp] JupyterLab extension loaded from /venv/lib/python3.11/site-packages/jupyterlab
[I 2026-12-03 07:42:13.628 LabApp] Extension Manager is 'pypi'.
[I 2026-12-03 07:42:13.822 ServerApp] Serving notebooks from local directory: /home/ana/project
[I 2026-12-03 07:42:13.822 ServerApp] Jupyter Server 2.21.1 is running at:
[I 2026-12-03 07:42:13.822 ServerApp] http://10.1.2.7:8893/lab?token=...
[I 2026-12-03 07:42:13.822 ServerApp] Use Control-C to stop this server and shut down all kernels.
"""


def test_the_url_is_found_once_jupyterlab_prints_it_and_not_before():
    assert find_url(STARTING.split("Jupyter Server")[0]) is None
    assert find_url(STARTING) == ("http", "10.1.2.7", 8893)
    assert find_url("[I ServerApp] https://[fd00::7]:9001/lab?token=...\n") == ("https", "[fd00::7]", 9001)


def test_the_url_to_open_is_at_the_nodes_address_with_the_clients_token():
    assert lab_url(("http", "10.1.2.7", 8893), "10.1.2.7", "ab12") == "http://10.1.2.7:8893/lab?token=ab12"
    assert lab_url(("http", "gpu-07", 8893), "fd00::7", "ab12") == "http://[fd00::7]:8893/lab?token=ab12"
    assert lab_url(("http", "gpu-07", 8893), "", "ab12") == "http://gpu-07:8893/lab?token=ab12"  # no address known


def test_the_command_runs_jupyterlab_from_the_jobs_environment_with_no_token_on_it():
    node_path = command_line(None, "8888-8999", "/home/ana/project")
    assert node_path[:4] == ["python3", "-c", LAUNCHER, "8888-8999"]
    assert node_path[4:] == ["jupyter", "lab", "--no-browser", "--allow-root",
                             "--ServerApp.root_dir=/home/ana/project"]
    venv = command_line("/home/ana/venv/bin/python", " 9000 - 9010 ", "/p")
    assert venv[0] == "/home/ana/venv/bin/python" and venv[3:7] == ["9000-9010", "/home/ana/venv/bin/python", "-m",
                                                                    "jupyterlab"]
    assert not any("token" in arg.lower() for arg in node_path + venv)
    assert "\n" not in LAUNCHER and "'" not in LAUNCHER  # one line in `dispatch queue`, quoted once


@pytest.mark.parametrize("bad", ["", "8888", "9000-8000", "80-90", "8888-70000", "a-b"])
def test_a_bad_port_range_is_one_line_naming_the_flag(bad):
    with pytest.raises(InvalidRequestError) as e:
        command_line(None, bad, "/p")
    assert e.value.field == "--port-range"
