"""The Model Context Protocol server: navarch's verbs for an assistant.

``server`` registers the tools over ``navarch.api``; ``views`` shapes what the assistant
sees (redacted, capped); ``confirm`` binds an acting call to a plan the server showed;
``consent`` asks the person, never the model, before anything acts.
"""
