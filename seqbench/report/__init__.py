"""Reports: select comparable runs, test differences, lay tables out as the papers do, render.

select (load + refuse mixing) → tables (the table model) → stats and significance (paired
tests, marks) and notes → entries (a report's runs grouped) → layouts (one `Layout` each,
registered in `LAYOUTS`, used by `seqbench report` and studies) → render (`FORMATS`), plots
for the figures; study and reproduce for studies and `seqbench reproduce`.
"""
