"""Reports: select comparable runs, test differences, lay tables out as the papers do, render.

select (load + refuse mixing) → stats (paired tests) → tables (layouts) → render (formats),
plots for the figures, layouts for `seqbench report`, reproduce for `seqbench reproduce`.
"""
