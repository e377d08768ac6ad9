"""Model families: the unregistered bodies several registered models extend.

A body is a whole model (config, encoder, training batches, loss, scoring) that no file
registers: `causal.SASRecBody` (SASRec, gSASRec, SASRec+), `two_view.CL4SRecBody` (CL4SRec,
CoSeRec), `cloze.BERT4RecBody` (BERT4Rec, NOVA-BERT) and `slide_windows.BERT4RecSBody`
(BERT4Rec_S, CBiT, CoSeBERT). Each model file subclasses one and declares its paper, departures
and dataset settings, so a model file imports shared modules only, never another model file:
changing one model (its departures, its defaults) can never change another by inheritance.
"""
