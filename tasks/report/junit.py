"""JUnit XML for CI: one testcase per gate.

A breach is a <failure>, an undecidable gate an <error>, so CI dashboards show which gate broke
and why without opening the report.

ElementTree escapes '&', '<', '>' and quotes, but writes control characters as they are, and
most of them (ESC, for one) are not allowed anywhere in an XML 1.0 document: one in a gate name
or an error message would leave CI a file it cannot parse. Every value from the run (suite, gate
names, reasons, run ids, paths, errors) therefore passes through `visible` first.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

from judges.blocks.plain_text import visible, visible_lines
from tasks.report.verdict_text import canary_line, gate_line, headline


def junit_xml(section: Mapping[str, Any], suite: str, report: str | None = None) -> str:
    """The regression section of a manifest as a JUnit XML document (UTF-8 text)."""
    gates = section.get("gates") or []
    canary = canary_line(section)
    drifted = bool((section.get("canary") or {}).get("drifted"))
    tests = len(gates) + (canary is not None)
    failures = sum(g["outcome"] == "breached" for g in gates)
    errors = sum(g["outcome"] == "undecidable" for g in gates) + drifted
    root = ET.Element("testsuites", name="judgeflow regression", tests=str(tests),
                      failures=str(failures), errors=str(errors))
    suite = visible(suite)
    testsuite = ET.SubElement(root, "testsuite", name=f"judgeflow.regression.{suite}",
                              tests=str(tests), failures=str(failures),
                              errors=str(errors), skipped="0")
    properties = ET.SubElement(testsuite, "properties")
    for name, value in (("outcome", section.get("outcome")),
                        ("baseline_run_id", section.get("baseline_run_id")),
                        ("report", report)):
        ET.SubElement(properties, "property", name=name, value=visible(value or ""))
    for gate in gates:
        name = visible(gate["metric"] + (f" [tag {gate['tag']}]" if gate.get("tag") else ""))
        case = ET.SubElement(testsuite, "testcase", classname=f"judgeflow.regression.{suite}",
                             name=name)
        line = gate_line(gate)
        if gate["outcome"] == "breached":
            ET.SubElement(case, "failure", message=visible(gate.get("reason") or "breached"),
                          type="GateBreached").text = line
        elif gate["outcome"] == "undecidable":
            ET.SubElement(case, "error", message=visible(gate.get("reason") or "undecidable"),
                          type="GateUndecidable").text = line
        else:
            ET.SubElement(case, "system-out").text = line
    if canary is not None:  # the judge itself, checked against the baseline's verdicts
        case = ET.SubElement(testsuite, "testcase", classname=f"judgeflow.regression.{suite}",
                             name="judge drift canary")
        if drifted:
            ET.SubElement(case, "error", message="the judge drifted since the baseline",
                          type="JudgeDrifted").text = canary
        else:
            ET.SubElement(case, "system-out").text = canary
    ET.SubElement(testsuite, "system-out").text = headline(section, suite)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def crash_junit_xml(suite: str, message: str) -> str:
    """A run that ended before deciding anything: one testcase with the error, so CI sees it."""
    suite, message = visible(suite), visible_lines(message)  # XML allows line breaks
    root = ET.Element("testsuites", name="judgeflow regression", tests="1", failures="0",
                      errors="1")
    testsuite = ET.SubElement(root, "testsuite", name=f"judgeflow.regression.{suite}", tests="1",
                              failures="0", errors="1", skipped="0")
    case = ET.SubElement(testsuite, "testcase", classname=f"judgeflow.regression.{suite}",
                         name="regression run")
    ET.SubElement(case, "error", message=message.splitlines()[0] if message else "error",
                  type="RunError").text = message
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
