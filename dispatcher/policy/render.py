"""Policy files, the other way: a PolicySet -> TOML text, and two policies' differences.

Pure. `render_policy(pset)` writes text that `parse_policy` reads back to an equal
PolicySet: the default profile's settings that differ from the built-in
PolicyConfig() go in [defaults], every profile then lists what differs from that,
followed by the schedule and the teams. Every PolicyConfig field a policy file can
set is found generically (dataclasses.fields against the parser's known keys), so
a knob added to both needs nothing here; one the file format cannot hold
(head_of_line, gang_across_nodes) raises ConfigError if it differs from the default.

`settings(pset)` flattens a policy into `path -> text` rows (`profiles.day.weights.wait`,
`teams.vision.limit_gpus`, `schedule[0]`, ...) and `diff_policies(a, b)` lists the
rows that differ, for `dispatch policy diff`, `apply` and `tune`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import fields

from ..core.alerts import AlertConfig
from ..core.errors import ConfigError
from ..core.units import exact, hhmm
from . import profiles as _profiles
from .config import WEIGHT_TERMS, PolicyConfig
from .profiles import DAYS, PolicySet, ScheduleEntry

#: Fields whose file key is not their name minus a unit suffix.
_KEY_OF = {"las_thresholds_gpu_s": "las_tiers"}
#: Fields that live outside the profiles (teams: the [teams.*] tables).
_OUTSIDE = {"teams"}
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _known_keys() -> set[str]:
    return set(getattr(_profiles, "_PROFILE_KEYS", ()))


def file_key(name: str) -> str | None:
    """The policy file's key for PolicyConfig field `name` (None: a file cannot set it)."""
    known = _known_keys()
    for key in (_KEY_OF.get(name), name, re.sub(r"_(s|pct|gpu_s)$", "", name)):
        if key and key in known:
            return key
    return None


def _is_duration(name: str) -> bool:
    return name.endswith("_s")


def _toml_string(s: str) -> str:
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_key(s: str) -> str:
    return s if _BARE_KEY.match(s) else _toml_string(s)


def _toml_number(x) -> str:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(x)
    if isinstance(x, int):
        return str(x)
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(float(x))


def _value(name: str, value) -> str:
    """One setting as TOML text."""
    if value is None:
        return '"never"'  # idle_requeue, reserve_longest_wait: the optional settings
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, dict):
        if name == "weights":  # a term the config leaves out weighs nothing; the file would inherit it
            value = {**{t: 0.0 for t in WEIGHT_TERMS}, **value}
        inner = ", ".join(f"{_toml_key(str(k))} = {_item(name, v)}" for k, v in value.items())
        return "{ " + inner + " }" if inner else "{}"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_item(name, v) for v in value) + "]"
    return _item(name, value)


def _item(name: str, v) -> str:
    if _is_duration(name) and isinstance(v, (int, float)) and not isinstance(v, bool):
        if math.isinf(v) or not float(v).is_integer():
            return _toml_number(float(v))
        return _toml_string(exact(v))
    return _toml_number(v)


def _profile_lines(config: PolicyConfig, base: PolicyConfig, where: str, force=frozenset()) -> list[str]:
    """`key = value` for every setting of `config` that differs from `base` (what the parser fills in),
    and for the fields in `force` (ones the parser would derive from another setting otherwise)."""
    lines = []
    for f in fields(config):
        if f.name in _OUTSIDE:
            continue
        value, inherited = getattr(config, f.name), getattr(base, f.name)
        if value == inherited and f.name not in force:
            continue
        key = file_key(f.name)
        if key is None:
            raise ConfigError(f"{where}: {f.name} = {value!r} cannot be written to a policy file "
                              f"(the file format has no key for it)", key=f"{where}.{f.name}")
        if isinstance(value, dict) and isinstance(inherited, dict) and f.name != "weights":
            dropped = sorted(set(inherited) - set(value))
            if dropped:  # the parser merges a table into the inherited one: it cannot remove an entry
                raise ConfigError(f"{where}.{key}: a policy file cannot leave out {dropped[0]!r}; give it a value",
                                  key=f"{where}.{key}")
        lines.append(f"{key} = {_value(f.name, value)}")
    return lines


def _teams_of(pset: PolicySet):
    teams = {name: cfg.teams for name, cfg in pset.profiles.items()}
    first = next(iter(teams.values()), {})
    for name, t in teams.items():
        if t != first:
            raise ConfigError(f"profiles.{name}: its teams differ from the other profiles'; a policy file gives "
                              f"every profile the same [teams]", key=f"profiles.{name}.teams")
    return first


def render_policy(pset: PolicySet) -> str:
    """TOML text that parse_policy reads back to a PolicySet equal to `pset`.
    ConfigError if `pset` holds something a policy file cannot say.

    A setting the parser derives from another (the starvation bounds from `targets`) is written
    explicitly when the derived value is not the one `pset` holds: the text is read back, and the
    fields that came back different are written again, until it reads back equal."""
    if pset.default_profile not in pset.profiles:
        raise ConfigError(f"default_profile: no profile named {pset.default_profile!r}", key="default_profile")
    force: dict[str | None, set] = {}  # section (None: [defaults]) -> fields to write even if inherited
    while True:
        text = _render(pset, force)
        back = _profiles.parse_policy(text)
        if back == pset:
            return text
        grew = False
        for name, config in pset.profiles.items():
            got = back.profiles.get(name, config)
            wrong = {f.name for f in fields(config) if getattr(got, f.name) != getattr(config, f.name)}
            section = None if name == pset.default_profile else name
            if wrong - force.get(section, set()):
                force.setdefault(section, set()).update(wrong)
                grew = True
        if not grew:  # writing every differing field did not help: say which one, rather than write a wrong file
            bad = next((f"profiles.{n}.{f.name}" for n, c in pset.profiles.items() for f in fields(c)
                        if getattr(back.profiles.get(n, c), f.name) != getattr(c, f.name)), "the profiles")
            raise ConfigError(f"{bad}: cannot be written so that the file reads back the same", key=bad)


def _render(pset: PolicySet, force: dict[str | None, set]) -> str:
    teams = _teams_of(pset)
    default = pset.profiles[pset.default_profile]
    base = PolicyConfig(teams=teams)
    out = ["# A dispatch policy file (see docs/policy.md); check it with `dispatch policy check FILE`.",
           f"default_profile = {_toml_string(pset.default_profile)}", "", "[defaults]"]
    out += _profile_lines(default, base, "defaults", force.get(None, set()))
    only_default = list(pset.profiles) == ["default"] and pset.default_profile == "default"
    if not only_default:
        for name, config in pset.profiles.items():
            out += ["", f"[profiles.{_toml_key(name)}]"]
            out += _profile_lines(config, default, f"profiles.{name}", force.get(name, set()))
    for e in pset.schedule:
        out += ["", "[[schedule]]", f"profile = {_toml_string(e.profile)}", f'from = "{hhmm(e.from_min)}"',
                f'to = "{hhmm(e.to_min)}"']
        if e.days != frozenset(range(7)):
            out.append("days = [" + ", ".join(f'"{DAYS[d]}"' for d in sorted(e.days)) + "]")
    for name, q in teams.items():
        out += ["", f"[teams.{_toml_key(name)}]", f"guarantee_gpus = {q.guarantee_gpus}"]
        if q.limit_gpus is not None:
            out.append(f"limit_gpus = {q.limit_gpus}")
    thresholds = alert_settings(pset.alerts)
    built_in = alert_settings(AlertConfig())
    changed = [f"{k} = {_toml_string(v) if _is_duration_text(k) else v}" for k, v in thresholds.items()
               if v != built_in[k]]
    if changed:
        out += ["", "[alerts]", *changed]
    return "\n".join(out) + "\n"


def _is_duration_text(alert_key: str) -> bool:
    """Whether an [alerts] key (alert_settings') is a duration, written as a string."""
    return any(f.name == alert_key + "_s" for f in fields(AlertConfig))


# -- differences --------------------------------------------------------------------------------
def _show(name: str, v) -> str:
    if v is None:
        return "never" if _is_duration(name) else "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return v
    if isinstance(v, (tuple, list)):
        return ",".join(_show(name, x) for x in v) or "(none)"
    if _is_duration(name) and isinstance(v, (int, float)):
        return exact(v) if not math.isinf(v) else "inf"
    return repr(v) if isinstance(v, float) else str(v)


def schedule_entry(e: ScheduleEntry) -> str:
    """One schedule rule in words: "night 20:00-08:00 sat,sun" (or "every day")."""
    days = "every day" if e.days == frozenset(range(7)) else ",".join(DAYS[d] for d in sorted(e.days))
    return f"{e.profile} {hhmm(e.from_min)}-{hhmm(e.to_min)} {days}"


def profile_settings(config: PolicyConfig) -> dict[str, str]:
    """One profile flattened: `weights.wait -> "0.12"`, `starvation.low -> "6d"`, `aging_horizon -> "2h"`."""
    out = {}
    for f in fields(config):
        if f.name in _OUTSIDE:
            continue
        key, value = file_key(f.name) or f.name, getattr(config, f.name)
        if isinstance(value, dict):
            if f.name == "weights":
                value = {**{t: 0.0 for t in WEIGHT_TERMS}, **value}
            for k in sorted(value):
                out[f"{key}.{k}"] = _show(f.name, value[k])
        else:
            out[key] = _show(f.name, value)
    return out


def settings(pset: PolicySet, *, names: list[str] | None = None) -> dict[str, str]:
    """`pset` as `path -> text`. `names`: the profiles to list (a name `pset` lacks shows its default
    profile's settings: what a job would get under it)."""
    out = {"default_profile": pset.default_profile, "profiles": ",".join(pset.profiles)}
    for name in names if names is not None else list(pset.profiles):
        config = pset.profiles.get(name, pset.profiles[pset.default_profile])
        out.update({f"profiles.{name}.{k}": v for k, v in profile_settings(config).items()})
    for i, e in enumerate(pset.schedule):
        out[f"schedule[{i}]"] = schedule_entry(e)
    for team, q in sorted(pset.profiles[pset.default_profile].teams.items()):
        out[f"teams.{team}.guarantee_gpus"] = str(q.guarantee_gpus)
        out[f"teams.{team}.limit_gpus"] = "none" if q.limit_gpus is None else str(q.limit_gpus)
    out.update((f"alerts.{k}", v) for k, v in alert_settings(pset.alerts).items())
    return out


def alert_settings(alerts) -> dict[str, str]:
    """The [alerts] table's thresholds as `key -> text`, under their file keys (core/alerts.py)."""
    return {f.name.removesuffix("_s").removesuffix("_pct"):
            exact(getattr(alerts, f.name)) if f.name.endswith("_s") else _toml_number(getattr(alerts, f.name))
            for f in fields(alerts)}


def diff_policies(a: PolicySet, b: PolicySet) -> list[tuple[str, str, str]]:
    """(setting, a's value, b's value) for every setting that differs, "-" where one has none.
    Profiles are matched by name; a side without a profile of that name is read as its default profile."""
    names = list(dict.fromkeys([*a.profiles, *b.profiles]))
    sa, sb = settings(a, names=names), settings(b, names=names)
    rows = []
    for key in dict.fromkeys([*sa, *sb]):
        va, vb = sa.get(key, "-"), sb.get(key, "-")
        if va != vb:
            rows.append((key, va, vb))
    return rows
