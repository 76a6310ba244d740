#!/usr/bin/env python3
"""Read an HdrHistogram interval log (.hlog) with a reader that is not prober's.

Usage: python3 read_hlog.py FILE

The daemon's interval logs are meant for the HdrHistogram tools of any
language, so a test reads them with the Python implementation (PyPI package
`hdrhistogram`, module `hdrh`):

    python3 -m pip install hdrhistogram==0.10.8

Every interval histogram is read with hdrh.log.HistogramLogReader, and one
JSON object is printed on stdout:

    {"intervals": N,
     "tags": {TAG: {"intervals": n, "count": C, "p50": V, "p99": V, "max": V,
                    "p50_ceil": V, "p99_ceil": V}},
     "lengths": [interval length in seconds, per interval in file order],
     "starts": [interval start in seconds since the Unix epoch, likewise],
     "start_time": the log's StartTime in seconds since the Unix epoch}

A tag's count is the total over its intervals, and its quantiles and max
are read from the sum of its interval histograms (values as recorded: ns for
prober; a quantile is the highest value equivalent to its bucket, as in
prober's own statistics). p50 and p99 are hdrh's value_at_percentile, which
takes the value of rank round(q * count); p50_ceil and p99_ceil take rank
ceil(q * count), as the Rust hdrhistogram crate (prober's summaries) does.
The two ranks differ by one when q * count has a fraction under one half,
and then the values may differ by a bucket: compare p50_ceil and p99_ceil
with prober's own numbers. Untagged intervals are under the tag "". A start
is the log's BaseTime plus the interval's timestamp, as the reader computes
it; lengths and starts are rounded to the microsecond, which removes the
reader's float noise (the log itself has milliseconds).

The reader skips lines it does not understand without a word, so the file
is first scanned here: every line must be blank, a comment (#...), the
legend, or an interval line ([Tag=NAME,]start,length,max,payload) whose
payload is a V2 histogram compressed with DEFLATE (cookie 0x1c849314), as
the interval log format requires; the reader must then return exactly one
histogram per interval line. Anything else (an empty file too; a header
with no interval is fine) exits with status 1 and a message on stderr
(status 2 for usage errors).
"""

import base64
import binascii
import json
import math
import re
import struct
import sys

# Cookies of V2 histogram encodings (HdrHistogram's word size 8 included).
V2_COMPRESSED_COOKIE = 0x1C849314
V2_COOKIE = 0x1C849313

INTERVAL = re.compile(
    r"^(?:Tag=([^,\s]*),)?"
    r"(\d+(?:\.\d*)?),(\d+(?:\.\d*)?),(\d+(?:\.\d*)?),"
    r"([A-Za-z0-9+/]+={0,2})$"
)


class BadLog(Exception):
    """The file is not an interval log this script can vouch for."""


def scan(path):
    """Returns the number of interval lines, after checking every line."""
    intervals = 0
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadLog(f"not a text file: {e}") from None
    if not text.strip():
        raise BadLog("empty file (an interval log starts with its header)")
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#") or line.startswith('"StartTimestamp"'):
            continue
        m = INTERVAL.match(line)
        if not m:
            raise BadLog(f"line {number}: not an interval line: {line[:80]!r}")
        try:
            head = base64.b64decode(m.group(5)[:12], validate=True)
        except (binascii.Error, ValueError) as e:
            raise BadLog(f"line {number}: payload is not base64: {e}") from None
        if len(head) < 8:
            raise BadLog(f"line {number}: payload too short")
        cookie, _length = struct.unpack(">II", head[:8])
        if cookie == V2_COOKIE:
            raise BadLog(
                f"line {number}: histogram is uncompressed V2 (cookie {cookie:#010x}); "
                f"interval logs carry V2 compressed with DEFLATE "
                f"(cookie {V2_COMPRESSED_COOKIE:#010x}), which other readers require"
            )
        if cookie != V2_COMPRESSED_COOKIE:
            raise BadLog(
                f"line {number}: unknown histogram encoding (cookie {cookie:#010x}, "
                f"expected {V2_COMPRESSED_COOKIE:#010x})"
            )
        intervals += 1
    return intervals


def values_at_ceil_rank(h, quantiles):
    """The value of rank ceil(q * count) for each q (ascending), as the Rust
    hdrhistogram crate's value_at_quantile: the highest value equivalent to
    the bucket that holds it."""
    total = h.get_total_count()
    ranks = [max(math.ceil(q * total), 1) for q in quantiles]
    out = []
    seen = 0
    for index in range(h.counts_len):
        seen += h.get_count_at_index(index)
        while len(out) < len(ranks) and seen >= ranks[len(out)]:
            out.append(h.get_highest_equivalent_value(h.get_value_from_index(index)))
        if len(out) == len(ranks):
            return out
    return out + [0] * (len(ranks) - len(out))  # an empty histogram


def read(path, expected):
    """Reads the log with hdrh's HistogramLogReader; returns the summary."""
    try:
        from hdrh.log import HistogramLogReader
    except ImportError as e:
        raise BadLog(
            f"the Python HdrHistogram package is missing ({e}): "
            "python3 -m pip install hdrhistogram==0.10.8"
        ) from None

    reader = HistogramLogReader(path, None)
    sums = {}
    per_tag = {}
    lengths = []
    starts = []
    try:
        while True:
            try:
                h = reader.get_next_interval_histogram()
            except Exception as e:  # the reader raises whatever its decoder does
                raise BadLog(
                    f"interval {len(starts) + 1}: cannot decode: {type(e).__name__}: {e}"
                ) from None
            if h is None:
                break
            tag = h.get_tag() or ""
            start_ms = h.get_start_time_stamp()
            starts.append(round(start_ms / 1000.0, 6))
            lengths.append(round((h.get_end_time_stamp() - start_ms) / 1000.0, 6))
            per_tag[tag] = per_tag.get(tag, 0) + 1
            if tag in sums:
                sums[tag].add(h)
            else:
                sums[tag] = h
        start_time = reader.get_start_time_sec()
    finally:
        reader.close()

    if len(starts) != expected:
        raise BadLog(
            f"{expected} interval lines, but the reader returned {len(starts)} "
            "(it skips lines it cannot parse and intervals before the log's StartTime)"
        )
    tags = {}
    for tag, h in sorted(sums.items()):
        p50_ceil, p99_ceil = values_at_ceil_rank(h, [0.5, 0.99])
        tags[tag] = {
            "intervals": per_tag[tag],
            "count": h.get_total_count(),
            "p50": h.get_value_at_percentile(50),
            "p99": h.get_value_at_percentile(99),
            "max": h.get_max_value(),
            "p50_ceil": p50_ceil,
            "p99_ceil": p99_ceil,
        }
    return {
        "intervals": len(starts),
        "tags": tags,
        "lengths": lengths,
        "starts": starts,
        "start_time": start_time,
    }


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print("usage: python3 read_hlog.py FILE", file=sys.stderr)
        return 2
    path = argv[1]
    try:
        summary = read(path, scan(path))
    except OSError as e:
        print(f"read_hlog: {path}: {e}", file=sys.stderr)
        return 1
    except BadLog as e:
        print(f"read_hlog: {path}: {e}", file=sys.stderr)
        return 1
    json.dump(summary, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
