"""Studies: a results folder's study.yaml (or a paper's table) → its runs, tables and README.

`spec` is the schema and `parse` reads it; `plan` expands a study into runs and tables; `run`
trains what is missing and renders; `output` builds the tables and writes the folder;
`papers` and `reproduce` turn a paper's published table into a study.
"""
