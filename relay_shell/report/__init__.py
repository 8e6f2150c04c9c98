"""`relay-shell audit report`: one self-contained HTML page an auditor reads a log with (adr/0023).

command.py (the command) → trust.py (verification, through audit/verify.py) → calls.py (records joined into calls)
→ summary.py (counts, exceptions) and transcripts.py (session casts) → verdict.py (the banner, the exit status) →
page.py (the HTML, with charts.py and blobs.py) and templates/ (the page's HTML, CSS and JavaScript).
"""
