"""Reading agent runs into a trajectory (judges/trajectory/model.py), whatever recorded them.

One reader per source: OpenAI-style chat messages with tool calls (chat_messages.py), MLflow
traces (mlflow_spans.py, reusing tasks/agents/mlflow_trace.py's reading of the trace layout) and
OpenInference / OpenTelemetry GenAI span exports (openinference.py, otel_export.py for the
export layouts). The two span readers describe each span the same way (span_facts.py) and
share one walk of the span tree (span_tree.py) that orders the steps, splits the turns and
counts every tool call once. Malformed input is an `AgentRunError` naming the message or span.
May import judges/ only: tasks/dataset reads its agent columns and MLflow traces with it.
"""
