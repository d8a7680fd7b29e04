"""The error every agent-run reader raises for input it cannot read."""

from __future__ import annotations

from judges.errors import ConfigError


class AgentRunError(ConfigError):
    """An agent run (chat messages, trace, span export) is malformed.

    The message names where (`messages[3]`, `span 3 (TOOL 'search')`) and what is wrong, so the
    user can fix the input from it alone.
    """
