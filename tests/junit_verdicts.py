#!/usr/bin/env python3
"""junit_verdicts.py: one line per test case of a JUnit XML report, "pass|fail|skip suite/case".

tests/run.sh reads these lines to count the unit tests. A case fails when the report gives it
a <failure> or an <error>; it is skipped when it has <skipped>. Exits 1, printing nothing on
stdout, when the report is missing or malformed (the binary crashed before writing it).
"""
import sys
import xml.etree.ElementTree as ET


def main(path):
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"junit_verdicts: cannot read {path}: {e}", file=sys.stderr)
        return 1
    for case in root.iter("testcase"):
        suite = case.get("classname", "")
        name = f"{suite}/{case.get('name')}" if suite else case.get("name")
        if case.find("failure") is not None or case.find("error") is not None:
            verdict = "fail"
        elif case.find("skipped") is not None:
            verdict = "skip"
        else:
            verdict = "pass"
        print(verdict, name.replace(" ", "_"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
