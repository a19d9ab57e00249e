"""Wire formats. Each module speaks one format both ways (as callers send it and as an upstream speaks it) and
satisfies the Protocols in base.py; common.py holds what they share."""
