#!/usr/bin/env python3
"""Summarizes one `bazel test` invocation from its build-event JSON file.

Usage: test_summary.py BEP_JSON BAZEL_EXIT_CODE

Prints one line per failed target, then "N passed, N failed[, N skipped]"
counting test cases (gtest <testcase> elements; a non-gtest test counts as
one case). Exits non-zero when anything failed or Bazel itself failed.
"""
import json
import os
import sys
import urllib.parse
import xml.etree.ElementTree as ET


def count_cases(xml_path):
    """Returns (passed, failed, skipped) test cases in a test.xml."""
    try:
        root = ET.parse(xml_path).getroot()
    except (OSError, ET.ParseError):
        return None
    passed = failed = skipped = 0
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.find("skipped") is not None or case.get("status") == "notrun":
            skipped += 1
        else:
            passed += 1
    return passed, failed, skipped


def main():
    bep_path, bazel_rc = sys.argv[1], int(sys.argv[2])
    results = {}     # label -> list of (status, test.xml path) per run/shard/attempt
    summaries = {}   # label -> overall status
    test_targets = set()
    failed_to_build = set()
    skipped_targets = set()
    with open(bep_path) as f:
        for line in f:
            event = json.loads(line)
            eid = event.get("id", {})
            if "targetCompleted" in eid:
                label = eid["targetCompleted"]["label"]
                completed = event.get("completed")
                if completed is None or not completed.get("success", False):
                    failed_to_build.add(label)
            elif "targetConfigured" in eid:
                configured = event.get("configured", {})
                if configured.get("testSize") or configured.get("targetKind", "").endswith(" test"):
                    test_targets.add(eid["targetConfigured"]["label"])
            elif "testResult" in eid:
                label = eid["testResult"]["label"]
                res = event.get("testResult", {})
                xml = None
                for out in res.get("testActionOutput", []):
                    if out.get("name") == "test.xml":
                        uri = out.get("uri", "")
                        if uri.startswith("file://"):
                            xml = urllib.parse.unquote(uri[len("file://"):])
                results.setdefault(label, []).append((res.get("status", "NO_STATUS"), xml))
            elif "testSummary" in eid:
                summaries[eid["testSummary"]["label"]] = event.get("testSummary", {}).get(
                    "overallStatus", "NO_STATUS")
            if event.get("aborted") and "targetCompleted" in eid:
                label = eid["targetCompleted"]["label"]
                reason = event["aborted"].get("reason", "")
                if reason == "SKIPPED":
                    skipped_targets.add(label)
                    failed_to_build.discard(label)
                else:
                    failed_to_build.add(label)

    passed = failed = skipped = 0
    bad = []
    for label in sorted(test_targets | set(summaries) | set(results)):
        if label in skipped_targets:
            skipped += 1
            continue
        status = summaries.get(label)
        runs = results.get(label, [])
        if status is None and not runs:
            if label in failed_to_build:
                failed += 1
                bad.append(f"{label}: FAILED TO BUILD")
            continue
        # The last attempt of each shard decides; count cases from its xml.
        xml_counts = [count_cases(x) for s, x in runs if x and os.path.exists(x)]
        xml_counts = [c for c in xml_counts if c is not None]
        ok = status in ("PASSED", "FLAKY")
        if xml_counts:
            p = sum(c[0] for c in xml_counts)
            fl = sum(c[1] for c in xml_counts)
            sk = sum(c[2] for c in xml_counts)
        else:
            p, fl, sk = (1, 0, 0) if ok else (0, 1, 0)
        if ok:
            if fl and status == "PASSED":
                # gtest never passes with a failed case; trust the xml.
                ok = False
            passed += p
            skipped += sk
            if status == "FLAKY":
                bad.append(f"{label}: FLAKY (passed on retry)")
        if not ok:
            failed += max(fl, 1)
            passed += p
            bad.append(f"{label}: {status}")
    for label in sorted(failed_to_build - set(summaries) - set(results) - test_targets):
        failed += 1
        bad.append(f"{label}: FAILED TO BUILD")

    for line in bad:
        print(line)
    if bazel_rc not in (0, 3, 4) and failed == 0:
        # 1: build failure not attributed to a test; anything else: Bazel error.
        failed += 1
        print(f"bazel exited with {bazel_rc} without a failed test")
    extra = f", {skipped} skipped" if skipped else ""
    print(f"{passed} passed, {failed} failed{extra}")
    sys.exit(0 if failed == 0 and bazel_rc in (0, 4) else 1)


if __name__ == "__main__":
    main()
