"""How evaluated text enters a prompt: inside <untrusted-…> blocks it can neither close nor open.

delimiters.py makes inert anything that a model would read as one of the blocks' tags,
look-alike and invisible characters included; plain_text.py makes the same text safe to print
(logs, state messages, terminals), for every layer above. Pure text functions: import nothing
from judgeflow. call_token.py adds the line, after the blocks, that asks for the call's token,
the one thing in a reply the evaluated text cannot supply (it imports only the signing key).
"""
