"""JUnit XML for CI: one testcase per gate.

A breach is a <failure>, an undecidable gate an <error>, so CI dashboards show which gate broke
and why without opening the report.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

from tasks.verdict_text import gate_line, headline


def junit_xml(section: Mapping[str, Any], suite: str, report: str | None = None) -> str:
    """The regression section of a manifest as a JUnit XML document (UTF-8 text)."""
    gates = section.get("gates") or []
    failures = sum(g["outcome"] == "breached" for g in gates)
    errors = sum(g["outcome"] == "undecidable" for g in gates)
    root = ET.Element("testsuites", name="judgeflow regression", tests=str(len(gates)),
                      failures=str(failures), errors=str(errors))
    testsuite = ET.SubElement(root, "testsuite", name=f"judgeflow.regression.{suite}",
                              tests=str(len(gates)), failures=str(failures),
                              errors=str(errors), skipped="0")
    properties = ET.SubElement(testsuite, "properties")
    for name, value in (("outcome", section.get("outcome")),
                        ("baseline_run_id", section.get("baseline_run_id")),
                        ("report", report)):
        ET.SubElement(properties, "property", name=name, value=str(value or ""))
    for gate in gates:
        name = gate["metric"] + (f" [tag {gate['tag']}]" if gate.get("tag") else "")
        case = ET.SubElement(testsuite, "testcase", classname=f"judgeflow.regression.{suite}",
                             name=name)
        line = gate_line(gate)
        if gate["outcome"] == "breached":
            ET.SubElement(case, "failure", message=gate.get("reason") or "breached",
                          type="GateBreached").text = line
        elif gate["outcome"] == "undecidable":
            ET.SubElement(case, "error", message=gate.get("reason") or "undecidable",
                          type="GateUndecidable").text = line
        else:
            ET.SubElement(case, "system-out").text = line
    ET.SubElement(testsuite, "system-out").text = headline(section, suite)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def crash_junit_xml(suite: str, message: str) -> str:
    """A run that ended before deciding anything: one testcase with the error, so CI sees it."""
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
