"""What people read: the report, summary.md, verdict text, JUnit XML.

The HTML report is a pure function; untrusted text is escaped for Markdown and for logs here
(markdown_text.py, plain_text.py). May import tasks/regression and judges/.
"""
