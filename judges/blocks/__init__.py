"""How evaluated text enters a prompt: inside <untrusted-…> blocks it can neither close nor open.

delimiters.py makes inert anything that a model would read as one of the blocks' tags,
look-alike and invisible characters included. Pure text functions: imports nothing from
judgeflow.
"""
