"""What `pip install .` (the README's quick start) installs: every file the code reads from beside itself.
`dispatch simulate --suite` failed after it, as the weeks it replays were not in the package."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_holds_the_lua_scripts_the_dashboards_files_and_the_suites_traces(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path), str(ROOT)], check=True, capture_output=True, timeout=300)
    [wheel] = tmp_path.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = [p.relative_to(ROOT).as_posix() for folder in ("dispatcher/store/lua", "dispatcher/views/dashboard/static",
                                                            "dispatcher/lab/traces")
              for p in sorted((ROOT / folder).iterdir()) if p.is_file()]
    assert "dispatcher/lab/traces/philly_week.csv" in wanted
    assert [w for w in wanted if w not in names] == []
