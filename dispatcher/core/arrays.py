"""Job arrays, as Slurm's `--array`: one request that becomes one job per index.

`--array 0-99%8` is 100 jobs with DISPATCH_ARRAY_INDEX 0..99, at most 8 of them running at once.
Each element is an ordinary job (its own id, log, attempts), and carries in its spec the array it
belongs to (`array_of`: the id of the array's first element, which names the array, as Slurm's
array job id does), its index, the array's size and its cap. The ids of one array are consecutive:
its elements are written in one transaction (store/jobs.write_jobs), in index order.

Pure: the indices, the elements, how `ID_INDEX` names one of them, and ranges of numbers as text.
"""

from __future__ import annotations

import re

from .errors import InvalidRequestError
from .model import JobSpec

#: The most elements one array may have (Slurm's default MaxArraySize is 1001) and the largest index.
MAX_ARRAY = 1000
MAX_INDEX = 10_000_000
#: The most jobs one job may wait for (--after and --after-any each), an array's elements counted one by
#: one: a dependency on an array is one on each of its elements (store/dependencies.expand_dependencies).
MAX_WAITED = 2 * MAX_ARRAY
#: What array_of holds until the array's ids are known: "new:<token>", one token per array in a submit.
NEW = "new:"
_PART = re.compile(r"([0-9]+)(?:-([0-9]+)(?::([0-9]+))?)?")


def parse_array(text: str) -> tuple[tuple[int, ...], int]:
    """'0-99%8' -> (indices 0..99, cap 8); '1,3,5-9:2' -> (1, 3, 5, 7, 9), cap 0 (none). Raises
    InvalidRequestError naming --array."""
    spec = str(text).strip()
    body, pct, cap_text = spec.partition("%")
    cap = 0
    if pct:
        if not cap_text.isdigit() or not 1 <= int(cap_text) <= MAX_ARRAY:
            raise InvalidRequestError(f"--array {spec}: the cap after % is a whole number from 1 to {MAX_ARRAY} "
                                      f"(0-99%8: at most 8 at once)", field="--array")
        cap = int(cap_text)
    out: dict[int, None] = {}
    for part in body.split(","):
        m = _PART.fullmatch(part.strip())
        if not part.strip():
            what = "an empty item (between commas or at an end)" if "," in body else "no index"
            raise InvalidRequestError(f"--array {spec}: {what}; give indices or ranges, e.g. 1,3,5-9 or 0-99%8",
                                      field="--array")
        if not m:
            raise InvalidRequestError(f"--array {spec}: {part.strip()!r} is not an index, "
                                      f"a range A-B or A-B:STEP (e.g. 0-99%8 or 1,3,5-9)", field="--array")
        lo, hi, step = int(m.group(1)), int(m.group(2) or m.group(1)), int(m.group(3) or 1)
        if hi < lo or step < 1 or hi > MAX_INDEX:
            raise InvalidRequestError(f"--array {spec}: {part.strip()} is not a range of indices from low to high "
                                      f"(at most {MAX_INDEX:,}, step at least 1)", field="--array")
        if (hi - lo) // step + 1 + len(out) > MAX_ARRAY:
            raise InvalidRequestError(f"--array {spec}: at most {MAX_ARRAY} elements in one array", field="--array")
        out.update(dict.fromkeys(range(lo, hi + 1, step)))
    return tuple(sorted(out)), cap


def elements(spec: JobSpec, text: str, token: str) -> list[JobSpec]:
    """The array's jobs, in index order: `spec` with its array fields; array_of is NEW + token until
    write_jobs knows the first element's id."""
    indices, cap = parse_array(text)
    if spec.nodes >= 2:
        raise InvalidRequestError("--array: a multi-node job (--nodes) cannot be an array; submit the gangs "
                                  "one by one", field="--array")
    return [spec.filled(array_of=NEW + token, array_index=i, array_count=len(indices), array_limit=cap)
            for i in indices]


def first_ids(specs, ids) -> dict[str, str]:
    """For write_jobs: each NEW token of these specs -> the id given to its first element."""
    out: dict[str, str] = {}
    for spec, job_id in zip(specs, ids):
        if spec.array_of.startswith(NEW):
            out.setdefault(spec.array_of, job_id)
    return out


def is_number(text: str) -> bool:
    """Whether `text` could be a job's record id or an index: ASCII digits, at most 18 of them (str.isdigit
    takes '²' and '١', which int() refuses or reads as 1, and int() refuses 4,301 digits: an internal error)."""
    return text.isascii() and text.isdigit() and len(text) <= 18


def element_name(text: str) -> tuple[str, int] | None:
    """'12_5' -> ('12', 5): element 5 of array 12; None for anything else."""
    head, sep, tail = str(text).partition("_")
    if sep and is_number(head) and is_number(tail):
        return head, int(tail)
    return None


def label(job: dict) -> str:
    """How people name a job (a view with id, array_of, array_index): an array's element as 12_5, as queue
    shows it and every command takes it; any other job by its id."""
    return f"{job['array_of']}_{job['array_index']}" if job.get("array_of") else job["id"]


def element_of(spec) -> str:
    """`12_5` for a JobSpec of element 5 of array 12, else "" (no spec, or a job of no array)."""
    return f"{spec.array_of}_{spec.array_index}" if spec is not None and spec.array_of \
        and spec.array_index is not None else ""


def request_jobs(request, build, token: str) -> list[JobSpec]:
    """The jobs of one submit request: `build(request)` (core/spec.spec_from_request), or, for a request
    with "array", its elements. `token`: unique among the arrays of one submit (the request's number)."""
    if not isinstance(request, dict) or "array" not in request:
        return [build(request)]
    text, rest = request["array"], {k: v for k, v in request.items() if k != "array"}
    if text is None:  # (the Python API's array=None: not an array)
        return [build(rest)]
    if isinstance(text, bool) or not isinstance(text, (str, int)) or not str(text).strip():
        raise InvalidRequestError(f"--array: {text!r} names no index; give the indices, e.g. 0-99%8 (at most 8 "
                                  f"at once) or 1,3,5-9", field="--array")
    return elements(build(rest), str(text), token)


def ranges(numbers, most: int = 0, *, steps: bool = True) -> str:
    """0,1,2,3,5,7,8 -> '0-3,5,7-8', and array indices 0,2,4,...,998 -> '0-998:2' (as --array takes a
    step; not with `steps` False, for job ids); with `most`, at most that many runs, then ' and N more'."""
    nums = sorted(set(numbers))
    runs: list[tuple[int, int, int, int]] = []  # (first, last, step, how many)
    k = 0
    while k < len(nums):
        j = k
        if k + 1 < len(nums):
            step = nums[k + 1] - nums[k]
            if step == 1 or (steps and k + 2 < len(nums) and nums[k + 2] - nums[k + 1] == step):  # 3 in a row
                j = k + 1
                while j + 1 < len(nums) and nums[j + 1] - nums[j] == step:
                    j += 1
        step = nums[j] - nums[j - 1] if j > k else 1
        runs.append((nums[k], nums[j], step, j - k + 1))
        k = j + 1
    shown = runs[:most] if most else runs
    text = ",".join(str(a) if n == 1 else f"{a}-{b}" if step == 1 else f"{a}-{b}:{step}"
                    for a, b, step, n in shown)
    left = sum(n for *_, n in runs[len(shown):])
    return f"{text} and {left} more" if left else text
