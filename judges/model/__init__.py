"""The one door to models; litellm behind it.

Settings, the request litellm gets (litellm_door.py is the only litellm import), retries, rate
and token limits, pacing, usage, local models and the finished-call meter. Imports nothing else
of judgeflow.
"""
