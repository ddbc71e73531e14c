"""Tests of the privacy package: purges, redaction, export."""
