import frexport.agent  # noqa: F401 - the one-line way: enables itself when FREXPORT_AGENT_DIR is set

exec(open(__file__.replace("train_imported.py", "train.py")).read())
