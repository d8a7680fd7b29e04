"""What an agent did, as one typed trajectory, and how a judge reads it.

The model (model.py: steps, tool calls, turns, the final response) is the one shape every
source of agent runs is read into (chat messages, MLflow traces, OpenInference / OpenTelemetry
GenAI spans: the readers live in tasks/agents/), so judges, metrics and the report never depend
on where a run came from. render.py turns a trajectory into the text a judge sees: every step in
order, nothing dropped, long content truncated with a marker. May import judges/ top-level
modules.
"""
