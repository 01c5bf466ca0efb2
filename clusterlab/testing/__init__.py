"""Test apparatus, kept out of production code: the planted-bug catalogue and the rules that plant
them (:mod:`clusterlab.testing.mutants`). No module of ``clusterlab.core`` imports this package
(import-linter's contract); a real member process takes planted rules only by name, through the
runtime's ``CLUSTERLAB_RULES``."""
