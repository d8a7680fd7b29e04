"""Judge calls through a provider's batch API: half the price, answers within hours.

`requests.py` writes a call as a line of the batch file and reads its answer back;
`ledger.py` keeps the run's batches in its folder, so that a resumed run never submits a
request twice; `broker.py` gathers calls into batches, submits them and polls them on a thread
of its own, through `provider.py` (each files and batches call, with its retries); `binding.py`
checks that a batch named by the ledger is this run's; `current.py` holds the process's broker
for the run. The model client (judges/model/llm.py) sends a call here instead of online when the
run is in batch mode; what comes back goes through the same parser and retries as online.
"""
