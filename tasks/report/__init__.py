"""What people read: the report, summary.md, verdict text, JUnit XML.

The HTML report is a pure function; untrusted text is escaped for Markdown here
(markdown_text.py, on judges/blocks/plain_text.py, which escapes it for logs). May import
tasks/regression and judges/.
"""
