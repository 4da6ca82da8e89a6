"""The book's tooling: what the notebooks use to state and check claims and show results, not
to learn anything. Claims and glue (:mod:`~replearn.book.claims`), seeds and the one
statistical rule (:mod:`~replearn.book.seeds`), committed results files
(:mod:`~replearn.book.results`) and which paper claims they reproduce
(:mod:`~replearn.book.outcomes`), figures (:mod:`~replearn.book.plotting`),
explorer widgets (:mod:`~replearn.book.widgets`) and what larger profiles need and cost
(:mod:`~replearn.book.scales`). The settings and their profiles (:mod:`replearn.settings`) and the
tables (:mod:`replearn.table`) sit below, in the library, which imports nothing from here. Import the module you need (nothing is imported here).
"""
