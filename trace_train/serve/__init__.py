"""``trace serve``: any trace policy behind an OpenAI-compatible ``/v1/chat/completions`` endpoint.

``protocol``  the OpenAI wire format (validation, tool-call parsing, stream chunks, errors)
``server``    the HTTP server and the request batcher
``loader``    policy specs: a model alias or directory (plus adapter), a composed artefact, or ``py:module:fn``
``commands``  the ``trace serve`` subcommand
"""
