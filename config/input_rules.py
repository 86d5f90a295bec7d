"""Classes of bad input that would otherwise fail only on GPUs, each one rule for every member.

Pure functions over raw values: settings.py calls them with the config key and turns a returned
reason into `key = value: reason. Fix: ...`. Every fix a rule suggests is itself accepted by the
same rule (tests/test_bad_input.py applies each suggestion and validates again).
"""

from __future__ import annotations

import difflib
import ipaddress
import math
import re

from pydantic_core import PydanticCustomError

# --- image references ------------------------------------------------------------------------
# [HOST[:PORT]/]PATH[:TAG][@sha256:DIGEST], lowercase path components (Docker distribution
# reference grammar); a tag or a digest is required, since an untagged name means a moving
# `:latest` the nodes pull later.
_IMAGE = re.compile(
    r"^(?:[a-z0-9]([-a-z0-9.]*[a-z0-9])?(?::[0-9]+)?/)?"
    r"[a-z0-9]+(?:[._-]+[a-z0-9]+|/[a-z0-9]+)*"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@sha256:(?P<digest>[0-9a-f]{64}))?$"
)


def image_problem(value: str) -> str | None:
    match = _IMAGE.match(value)
    if match is None:
        return (
            "not an image reference (lowercase [HOST/]PATH, then :TAG or @sha256:DIGEST; no "
            "spaces or uppercase in the path)"
        )
    if not match["tag"] and not match["digest"]:
        return "has no tag or digest, so the nodes would pull whatever `latest` is that day"
    return None


# --- versions and git refs -------------------------------------------------------------------
_RAY_VERSION = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+$")
# Tags, branches and commit SHAs; nothing a shell or Hydra would read as syntax.
_GIT_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,99}$")
_MOVING_REFS = frozenset({"latest", "head", "main", "master"})


def ray_version_problem(value: str) -> str | None:
    # It names the Ray release inside the image (KubeRay's rayVersion): only a release number can.
    if _RAY_VERSION.match(value):
        return None
    return "not a Ray release number MAJOR.MINOR.PATCH (e.g. 2.47.0)"


def git_ref_problem(value: str) -> str | None:
    if not value.strip():
        return "empty"
    if value.lower() in _MOVING_REFS:
        return "a moving name, not a pinned verl version (use a tag such as v0.6.1 or a commit)"
    if not _GIT_REF.match(value) or ".." in value or value.endswith((".lock", "/", ".")):
        return (
            "not a git tag, branch or commit (letters, digits, . _ / -; no spaces, shell "
            "metacharacters or '..')"
        )
    return None


# --- model ids -------------------------------------------------------------------------------
_MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")
_HUB_URL = re.compile(r"^https?://(?:www\.)?(?:huggingface\.co|hf\.co)/(?P<id>[^/?#]+/[^/?#]+)")


# A Hub commit id: 40 lowercase hex digits (huggingface_hub file_download.py REGEX_COMMIT_HASH,
# 0.36.2); any other revision is a branch or tag, which moves.
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def is_commit(value: str) -> bool:
    return bool(_COMMIT.match(value))


def model_problem(value: str, default: str) -> tuple[str, str] | None:
    """(reason, suggested id) when `value` is not a Hugging Face ORG/NAME id."""
    if _MODEL_ID.match(value) and ".." not in value:
        return None
    url = _HUB_URL.match(value.strip())
    if url and _MODEL_ID.match(url["id"]):
        return "a URL, not a Hub model id; the id is the ORG/NAME part", url["id"]
    if "/" not in value:
        org = default.split("/", 1)[0]
        guess = f"{org}/{value}" if value.lower().startswith(org.lower()) else default
        if not _MODEL_ID.match(guess):
            guess = default
        return "has no organisation; Hub ids are ORG/NAME", guess
    return "not a Hub model id ORG/NAME (letters, digits, _ . -)", default


# --- the Hugging Face token ------------------------------------------------------------------
_HF_TOKEN = re.compile(r"^hf_[A-Za-z0-9_]+$")


def hf_token_problem(value: str) -> str | None:
    """Why `value` cannot be a token. Never quotes the value."""
    if value != value.strip():
        return "has leading or trailing whitespace (often a copied newline)"
    if not _HF_TOKEN.match(value):
        return "does not look like a Hugging Face token (hf_ followed by letters and digits)"
    return None


# --- the fabric check's pass mark ------------------------------------------------------------
# No collective's bus bandwidth exceeds the fastest link a GPU has: NVLink 5 (GB200, B200) is
# 1.8 TB/s per GPU, both directions together, so 900 GB/s one way (NVIDIA GB200 NVL72 spec).
MAX_BUSBW_GBPS = 900.0


def busbw_problem(value: float) -> str | None:
    if not math.isfinite(value):
        return "not a finite number"
    if value > MAX_BUSBW_GBPS:
        return (
            f"above {MAX_BUSBW_GBPS:g} GB/s, the one-way NVLink 5 bandwidth of a GPU; no fabric "
            "reaches it, so the check would always fail"
        )
    return None


# --- config namespaces -----------------------------------------------------------------------


def near_miss_namespace(key: str, namespace: str) -> bool:
    """`verl_gke:x`, `verlgke:x`, `Verl-Gke:x`, `verl-gke-:x`: meant for `namespace`, not it."""
    prefix = key.split(":", 1)[0]
    if ":" not in key or prefix == namespace:
        return False

    def squash(text: str) -> str:
        return re.sub(r"[^a-z0-9]", "", text.lower())

    if squash(prefix) == squash(namespace):
        return True
    return difflib.SequenceMatcher(None, prefix.lower(), namespace).ratio() >= 0.8


# --- CPU machine types -----------------------------------------------------------------------
# x86 highmem shapes per family (vCPU counts), from Compute Engine's machine family pages
# (general-purpose: E2, N1, N2, N2D, N4, N4D; compute-optimized: C3, C3D, C4, C4D). x86 only:
# the data-prep Job and, on x86 stacks, the Ray head run images built for amd64.
HIGHMEM_SHAPES: dict[str, tuple[int, ...]] = {
    "e2": (2, 4, 8, 16),
    "n1": (2, 4, 8, 16, 32, 64, 96),
    "n2": (2, 4, 8, 16, 32, 48, 64, 80, 96, 128),
    "n2d": (2, 4, 8, 16, 32, 48, 64, 80, 96),
    "n4": (2, 4, 8, 16, 32, 48, 64, 80),
    "n4d": (2, 4, 8, 16, 32, 48, 64, 80, 96),
    "c3": (4, 8, 22, 44, 88, 176),
    "c3d": (4, 8, 16, 30, 60, 90, 180, 360),
    "c4": (2, 4, 8, 16, 24, 32, 48, 96, 144, 192, 288),
    "c4d": (2, 4, 8, 16, 32, 48, 64, 96, 192, 384),
}
# The Ray head (x86 stacks) and the data-prep Job need >= 16 vCPUs and highmem (tutorial).
MIN_CPU_VCPUS = 16
_MACHINE = re.compile(r"^(?P<family>[a-z0-9]+)-(?P<kind>[a-z]+)-(?P<vcpus>[0-9]+)$")


def cpu_machine_problem(value: str) -> tuple[str, str] | None:
    """(reason, suggested machine type) when `value` is not an x86 highmem shape >= 16 vCPUs."""
    match = _MACHINE.match(value)
    family = match["family"] if match else value.split("-", 1)[0]
    if family not in HIGHMEM_SHAPES:
        known = ", ".join(sorted(HIGHMEM_SHAPES))
        return f"not an x86 machine family with highmem shapes ({known})", "n4-highmem-16"
    sizes = HIGHMEM_SHAPES[family]
    fitting = [n for n in sizes if n >= MIN_CPU_VCPUS]
    suggestion = f"{family}-highmem-{fitting[0]}" if fitting else "n4-highmem-16"
    if match is None or match["kind"] != "highmem":
        return f"the CPU pool needs a highmem machine with >= {MIN_CPU_VCPUS} vCPUs", suggestion
    vcpus = int(match["vcpus"])
    if vcpus not in sizes:
        return f"{family}-highmem comes in {', '.join(map(str, sizes))} vCPUs only", suggestion
    if vcpus < MIN_CPU_VCPUS:
        return f"the CPU pool needs at least {MIN_CPU_VCPUS} vCPUs", suggestion
    return None


# --- CIDR ranges -----------------------------------------------------------------------------
# GKE gives each node a /24 of the pod range by default (110 pods per node, "Optimize IP address
# allocation"); a subnet loses 4 addresses to Google (VPC "Reserved IP addresses in IPv4 subnets").
POD_BLOCK_PREFIX = 24
SUBNET_RESERVED = 4


def ipv4_network(value: str) -> ipaddress.IPv4Network | str:
    """The network, or why `value` is not an IPv4 CIDR range."""
    try:
        network = ipaddress.ip_network(value, strict=True)
    except ValueError as error:
        return f"not an IPv4 CIDR range such as 10.128.0.0/20 ({error})"
    if not isinstance(network, ipaddress.IPv4Network):
        return "IPv6; GKE's node, pod and service ranges here are IPv4"
    return network


def pods_prefix_needed(nodes: int) -> int:
    return POD_BLOCK_PREFIX - math.ceil(math.log2(max(nodes, 1)))


def host_prefix_needed(nodes: int) -> int:
    return 32 - math.ceil(math.log2(nodes + SUBNET_RESERVED))


def free_range(
    prefix: int, taken: list[ipaddress.IPv4Network], pool: str = "10.0.0.0/8"
) -> ipaddress.IPv4Network:
    """The first /`prefix` block of `pool` that overlaps none of `taken`."""
    for candidate in ipaddress.IPv4Network(pool).subnets(new_prefix=prefix):
        if not any(candidate.overlaps(t) for t in taken):
            return candidate
    raise ValueError(f"no free /{prefix} in {pool}")


# --- whole numbers ---------------------------------------------------------------------------
# Pulumi hands config values over as text (and `--path` objects as JSON). YAML 1.1 reads `010` as
# the octal 8 while Python reads 10, and pydantic's lax mode takes `true` as 1: both are refused
# rather than guessed.
_LEADING_ZERO = re.compile(r"[+-]?0[0-9]+")


def whole_number(value: object) -> object:
    """`value` unchanged, or ValueError when it is a boolean or a number with a leading zero."""
    if isinstance(value, bool):
        raise ValueError("a boolean where a whole number belongs (true is not read as 1)")
    if isinstance(value, str) and _LEADING_ZERO.fullmatch(value.strip()):
        raise ValueError(
            "has a leading zero, which YAML 1.1 reads as an octal number (010 is 8) and Python "
            "as a decimal one; write the number without it"
        )
    return value


def number_candidates(value: object, whole: bool = True, minutes: bool = False) -> list[str]:
    """What a refused number most likely meant (`010` -> 10, `true` -> 1, `4.0` -> 4, `$41.50` ->
    41.5 for a decimal setting, `2h` -> 120 for a minutes setting)."""
    if isinstance(value, bool):
        return [str(int(value))]
    text = str(value).strip()
    if _LEADING_ZERO.fullmatch(text):
        return [str(int(text, 10))]
    if text.lower() in NUMBER_WORDS:
        return [str(NUMBER_WORDS[text.lower()])]
    found = [str(duration)] if minutes and (duration := duration_minutes(text)) else []
    if whole and (thousands := _THOUSANDS.fullmatch(text)):
        # `32k` tokens is 32768 (lengths are powers of two), else 32000: the first one the
        # setting's rules accept is the fix.
        count = float(thousands["number"])
        found += [str(round(count * 1024)), str(round(count * 1000))]
    number = number_in(text)
    if number is not None:
        found.append(str(round(number)) if whole else repr(number))
    return found


# Whole numbers written as words (`four` GPU nodes, `eight` rollouts).
NUMBER_WORDS = {
    word: number
    for number, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
        "fifteen sixteen seventeen eighteen nineteen twenty".split()
    )
}
# A price or amount as people write it: `$41.50`, `41.50 USD`, `1,200`, `41.5/h`.
_AMOUNT = re.compile(
    r"^(?:US)?\$?\s*(?P<number>[+-]?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]*)(?:\.[0-9]+)?)\s*"
    r"(?:usd|dollars?)?\s*(?:/\s*(?:h|hr|hour))?$",
    re.IGNORECASE,
)
# A count with a thousands suffix: `32k`, `1.5K`.
_THOUSANDS = re.compile(r"(?P<number>[0-9]+(?:\.[0-9]+)?)\s*[kK]")
# A duration: `2h`, `90m`, `1h30m`, `1.5 hours`, `2 hrs`, `1d`.
_DURATION = re.compile(
    r"^(?:(?P<days>[0-9]+(?:\.[0-9]+)?)\s*d(?:ays?)?)?\s*"
    r"(?:(?P<hours>[0-9]+(?:\.[0-9]+)?)\s*h(?:ours?|rs?)?)?\s*"
    r"(?:(?P<minutes>[0-9]+)\s*m(?:in(?:ute)?s?)?)?$",
    re.IGNORECASE,
)


def number_in(text: str) -> float | None:
    """The number of an amount written with a currency sign, unit or thousands separators (a
    comma before 1 or 2 final digits is a decimal comma: `41,50` is 41.5, `1,200` is 1200)."""
    text = re.sub(r"^([^,]*[0-9]),([0-9]{1,2})(?![0-9])([^,]*)$", r"\1.\2\3", text.strip())
    match = _AMOUNT.fullmatch(text)
    if match is None or match["number"] in ("", "+", "-"):
        return None
    number = float(match["number"].replace(",", ""))
    return number if math.isfinite(number) else None


def duration_minutes(text: str) -> int | None:
    """Whole minutes of a duration with units (`2h` -> 120); None for a bare number or no
    duration."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or not any(match.groupdict().values()):
        return None
    days, hours, minutes = (float(match[name] or 0) for name in ("days", "hours", "minutes"))
    return round(days * 1440 + hours * 60 + minutes)


# Words for a switch (YAML 1.1's boolean words and the usual abbreviations): what a refused
# boolean text meant.
_TRUE_WORDS = frozenset({"true", "yes", "y", "on", "enable", "enabled"})
_FALSE_WORDS = frozenset({"false", "no", "n", "off", "disable", "disabled"})


def boolean_meant(value: object) -> str | None:
    """`true`/`false` for a word that says yes or no (`yes`, `On`, `0`), else None."""
    text = str(value).strip().lower()
    if text in _TRUE_WORDS:
        return "true"
    if text in _FALSE_WORDS:
        return "false"
    return None


def pulumi_boolean(value: object) -> object:
    """An optional switch declared a string in Pulumi.yaml (Pulumi's boolean type cannot be left
    unset, config/declared_defaults.py) read as Pulumi reads a `boolean`: a bool or the text
    true/false (planning/pulumi_config.type_accepts). Other text (`on`, `yes`) is refused as a
    boolean error, whose fix names what it meant (type_error_candidates)."""
    if value is None or isinstance(value, bool):
        return value
    if value in ("true", "false"):
        return value == "true"
    raise PydanticCustomError(
        "bool_parsing", "must be true or false (what Pulumi takes for a boolean)"
    )


def declared_type_candidates(type_name: str, text: str, minutes: bool = False) -> list[str]:
    """Values of a Pulumi.yaml type (`boolean`, `integer`) that `text` most likely meant."""
    if type_name == "boolean":
        meant = boolean_meant(text)
        return [meant] if meant else []
    if type_name == "integer":
        return number_candidates(text, minutes=minutes)
    return []


# Other names of a choice (`preemptible` -> `spot`): Compute Engine, "Spot VMs": Spot VMs are the
# latest version of preemptible VMs; "on-demand" is the capacity without a reservation.
CHOICE_SYNONYMS = {
    "preemptible": "spot",
    "preemptive": "spot",
    "spotvm": "spot",
    "dws": "flexStart",
    "flex": "flexStart",
    "dynamicworkloadscheduler": "flexStart",
    "reserved": "reservation",
}


def nearest_choice(value: object, choices: list[str]) -> str | None:
    """The choice `value` most likely meant: equal ignoring case and separators
    (first_step -> firstStep), else the closest spelling."""
    squashed = re.sub(r"[-_ ]", "", str(value)).lower()
    synonym = CHOICE_SYNONYMS.get(squashed)
    if synonym in choices:
        return synonym
    for choice in choices:
        if re.sub(r"[-_ ]", "", choice).lower() == squashed:
            return choice
    close = difflib.get_close_matches(str(value), choices, n=1, cutoff=0.5)
    return close[0] if close else None


# --- keys a user typed -----------------------------------------------------------------------
# Keys users set under verl-gke: that belong to another namespace.
OTHER_NAMESPACE_KEYS = {
    "region": "the region is gcp:region (verl-gke:zone must be one of its zones)",
    "project": "the project is gcp:project",
}


def flat_object_key(key: str, value: str, stack: str, known: list[str]) -> str | None:
    """`verl-gke:job.trainBatchSize` set without --path: Pulumi stores a flat key of that name
    (`pulumi config set` docs: `--path` sets a field of an object), which the program never
    reads."""
    base, _, path = key.partition(".")
    if not path or base not in known:
        return None
    return (
        f"{key} = {value!r}: set without --path, so Pulumi stored a key named {key!r} instead "
        f"of the field {path!r} of {base}. Fix: pulumi config rm {key} -s {stack}, then "
        f"pulumi config set --path {key} {value} -s {stack}"
    )


def unknown_key_hint(key: str, stack: str, known: list[str], value: str | None = None) -> str:
    """What a key that is no setting was meant to be, and the fix (removing it)."""
    typed = key.split(":", 1)[1]
    remove = f"pulumi config rm {key} -s {stack}"
    if typed in OTHER_NAMESPACE_KEYS:
        meant = f"gcp:{typed}"
        then = f", then pulumi config set {meant} {value} -s {stack}" if value else ""
        return f"{OTHER_NAMESPACE_KEYS[typed]}. Fix: {remove}{then}"
    # Compare without the shared "verl-gke:" prefix, which would make everything look close, and
    # ignoring case; 0.8 keeps a typo's match and drops unrelated keys (region -> rayVersion).
    short = {k.split(":", 1)[1].lower(): k for k in known}
    close = difflib.get_close_matches(typed.lower(), list(short), n=1, cutoff=0.8)
    if close:
        meant = short[close[0]]
        # The value typed goes to the key meant; a secret's never appears in a message.
        secret = re.search(r"(token|secret|password|apikey|api_key)$", meant, re.IGNORECASE)
        if secret:
            then = f"pulumi config set --secret {meant} VALUE -s {stack}"
        elif value:
            then = f"pulumi config set {meant} {value} -s {stack}"
        else:
            then = f"set {meant}"
        return f"did you mean {meant}? Fix: {remove}, then {then}"
    return f"valid keys: {', '.join(known)}. Fix: {remove}"


def type_error_candidates(
    kind: str, value: object, ctx: dict | None, minutes: bool = False
) -> list[str]:
    """Values a pydantic type, range or choice error most likely meant, likeliest first: the
    nearest allowed choice, the number meant (a duration in minutes for a minutes setting, a
    decimal for a float), the violated bound. Booleans get a word's meaning (`yes` -> true),
    else none: a refused switch gets its default, never a guess."""
    ctx = ctx or {}
    candidates: list[str] = []
    if "expected" in ctx:
        nearest = nearest_choice(value, re.findall(r"'([^']*)'", str(ctx["expected"])))
        candidates += [nearest] if nearest else []
    if kind.startswith("bool_"):
        meant = boolean_meant(value)
        candidates += [meant] if meant else []
    if kind.startswith(("int_", "float_", "value_error")) and not _is_number(value):
        whole = not kind.startswith("float_")
        candidates += number_candidates(value, whole=whole, minutes=minutes)
    candidates += [str(ctx[bound]) for bound in ("ge", "le", "gt", "lt") if bound in ctx]
    if kind.startswith(("int_", "float_", "value_error")) and _is_number(value):
        candidates += number_candidates(value)
    return candidates


def _is_number(value: object) -> bool:
    try:
        float(str(value))
    except ValueError:
        return False
    return True
