#!/usr/bin/env python3
"""convgraph-bench's --json, --csv and --report read back with Python's parsers (json, csv,
xml.etree), on two tiny layers whose names hold quotes, markup characters, a comma, a
backslash and non-ASCII text; --estimates-only on them; plus the error paths of --report
and --anchors.

usage: check_outputs.py CONVGRAPH_BENCH WORK_DIR
"""
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import xml.etree.ElementTree as ET

HOSTILE = ['q"uote<&>\'\u00e9\\back', 'comma,name"x&amp;']
LAYERS = f"""# name N C K spatial kernel stride pad dilation groups
{HOSTILE[0]}  1 4 4 8x8 3x3 1x1 1x1 1x1 1
{HOSTILE[1]}  2 3 5 17  3   1   1   1   1
"""
DIRECTIONS = ["fwd", "bwd_data"]
REPEATS = 3
XHTML = "{http://www.w3.org/1999/xhtml}"
SVG = "{http://www.w3.org/2000/svg}"

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def text_of(e):
    return "".join(e.itertext())


def main():
    bench, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    path = lambda name: os.path.join(work, name)
    with open(path("layers.txt"), "w", encoding="utf-8") as f:
        f.write(LAYERS)
    with open(path("anchors.json"), "w", encoding="utf-8") as f:  # as convgraph-anchors writes it
        json.dump({"tool": "convgraph-anchors", "records": [
            {"layer": HOSTILE[0], "direction": "fwd", "algorithm": "cpu.corrmm", "convgraph_ms": 0.01,
             "onednn_ms": 0.02}]}, f)
    args = [bench, "--layers", path("layers.txt"), "--directions", ",".join(DIRECTIONS), "--repeats", str(REPEATS),
            "--all-algorithms", "--early-stop", "0", "--threads", "2", "--json", path("out.json"), "--csv",
            path("out.csv"), "--report", path("report"), "--anchors", path("anchors.json")]
    # A fixed machine model: the estimates-only run below must see the same defaults.
    env = dict(os.environ, CONVGRAPH_MACHINE="gflops=100,bandwidth=20")
    r = subprocess.run(args, capture_output=True, text=True, timeout=100, env=env)
    if not check(r.returncode == 0, f"convgraph-bench exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"):
        return
    out = r.stdout
    check("declined:" not in out, "a table still lists declined candidates")
    for name in HOSTILE:
        check(out.count(f"declined on {name} ") <= 1, f"declined candidates of {name} listed more than once")
    check(not any(c in r.stderr for c in "\r\033"), "progress redrawn on stderr although it is not a terminal")

    # JSON: the run's header and every record with its samples.
    with open(path("out.json"), encoding="utf-8") as f:
        doc = json.load(f)
    for key in ("tool", "host", "cpu_model", "isa", "isa_detected", "version", "commit", "threads", "load_average",
                "date", "repeats", "mode", "records", "summary"):
        check(key in doc and doc[key] not in ("", None), f"JSON: '{key}' missing or empty")
    check(doc.get("flags") == "", "JSON: flags")
    check(len(doc.get("load_average", [])) == 3, "JSON: load_average is not 1/5/15 minutes")
    records = doc["records"]
    check({rec["layer"] for rec in records} == set(HOSTILE), f"JSON: layer names changed: {[x['layer'] for x in records][:4]}")
    ran = [rec for rec in records if rec["status"] in ("timed", "early_stopped", "wrong")]
    check(len(ran) >= 2 * len(DIRECTIONS), f"JSON: only {len(ran)} candidates ran")
    for rec in ran:
        s = rec["samples_ms"]
        check(len(s) == rec["runs"] == REPEATS, f"JSON: {rec['algorithm']}: {len(s)} samples, runs {rec['runs']}")
        check(abs(statistics.median(s) - rec["median_ms"]) <= 1e-9 + 1e-6 * rec["median_ms"],
              f"JSON: {rec['algorithm']}: median_ms is not the median of samples_ms")
        check(min(s) == rec["min_ms"] and max(s) == rec["max_ms"], f"JSON: {rec['algorithm']}: min/max")
    chosen = [rec for rec in records if rec["chosen"]]
    check(len(chosen) == len(HOSTILE) * len(DIRECTIONS), f"JSON: {len(chosen)} chosen, one per layer and direction expected")

    # CSV: one row per record, the same names and samples.
    with open(path("out.csv"), newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    check(len(rows) == len(records), f"CSV: {len(rows)} rows for {len(records)} records")
    for row, rec in zip(rows, records):
        check(row["layer"] == rec["layer"] and row["algorithm"] == rec["algorithm"], f"CSV row {row['layer']!r}")
        check(len(row["samples_ms"].split()) == len(rec["samples_ms"]), f"CSV: samples of {row['algorithm']}")

    # The report: well-formed XHTML; the names as written; one roofline point per candidate
    # that ran; one bar chart per (layer, direction) with a bar per candidate that ran and
    # oneDNN's bar where the anchor file has one.
    page = ET.parse(path("report/index.html")).getroot()
    check(page.tag == XHTML + "html", f"report: root element {page.tag}")
    headings = [text_of(h) for h in page.iter(XHTML + "h2")]
    for name in HOSTILE:
        check(name in headings, f"report: no section headed {name!r} (headings {headings})")
    svgs = list(page.iter(SVG + "svg"))
    check(len(svgs) == 1 + len(HOSTILE) * len(DIRECTIONS), f"report: {len(svgs)} charts")
    roof = svgs[0]
    points = [c for c in roof.iter(SVG + "circle") if " GFLOP/s at " in text_of(c)]
    check(len(points) == len([x for x in ran if x["gflops"]]), f"report: {len(points)} roofline points for {len(ran)} runs")
    check(sum("(chosen)" in text_of(c) for c in points) == len(chosen), "report: chosen points")
    check(any("peak" in text_of(t) for t in roof.iter(SVG + "text")), "report: no peak line label")
    for chart in svgs[1:]:
        title = text_of(next(chart.iter(SVG + "text")))
        layer, direction = title.rsplit("  ", 1)
        bars = [t for t in chart.iter(SVG + "rect")]
        want = len([x for x in ran if x["layer"] == layer and x["direction"] == direction])
        anchored = layer == HOSTILE[0] and direction == "fwd"
        check(len(bars) == want + anchored, f"report: chart {title!r} has {len(bars)} bars, {want + anchored} expected")
        check(anchored == any("oneDNN" in text_of(b) for b in bars), f"report: oneDNN bar in {title!r}")

    # --estimates-only: nothing timed; every applicable candidate's estimate, and one
    # fast_run default per (layer, direction), the same one the timed run marked.
    r = subprocess.run([bench, "--layers", path("layers.txt"), "--directions", ",".join(DIRECTIONS), "--threads", "2",
                        "--estimates-only", "--json", path("estimates.json")], capture_output=True, text=True, timeout=60,
                       env=env)
    if check(r.returncode == 0, f"--estimates-only exited {r.returncode}: {r.stderr[-2000:]}"):
        check("nothing was timed" in r.stdout, "--estimates-only: no 'nothing was timed' line")
        with open(path("estimates.json"), encoding="utf-8") as f:
            est = json.load(f)["records"]
        check({x["status"] for x in est} <= {"estimated", "skipped"}, f"--estimates-only: statuses {[x['status'] for x in est]}")
        check(all(x["estimated_ms"] > 0 for x in est if x["status"] == "estimated"), "--estimates-only: an estimate <= 0")
        check(all(not x["samples_ms"] for x in est), "--estimates-only: samples recorded")
        for name in HOSTILE:
            for d in DIRECTIONS:
                picks = [x["algorithm"] for x in est if x["layer"] == name and x["direction"] == d and x["default_choice"]]
                timed = [x["algorithm"] for x in records if x["layer"] == name and x["direction"] == d and x["default_choice"]]
                check(len(picks) == 1 and picks == timed, f"--estimates-only: {name} {d} defaults {picks}, timed run {timed}")

    # Bad output paths and anchor files are usage errors (exit 2) naming the option.
    def usage_error(extra, words):
        r = subprocess.run([bench, "--layers", path("layers.txt"), "--directions", "fwd", "--repeats", "1"] + extra,
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 2 and all(w in r.stderr for w in words), f"{extra}: exit {r.returncode}, {r.stderr!r}")
    usage_error(["--report", path("out.json/sub")], ["--report", "out.json/sub"])
    usage_error(["--anchors", path("layers.txt")], ["--anchors", "layers.txt", "JSON"])
    usage_error(["--anchors", path("out.json")], ["--anchors", "convgraph-anchors"])
    usage_error(["--csv", path("no/such/dir/x.csv")], ["x.csv"])


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # a parse error is a failure of the output, not of the checker
        failures.append(f"{type(e).__name__}: {e}")
    for f in failures:
        print("FAIL:", f)
    print("bench outputs:", "ok" if not failures else f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)
