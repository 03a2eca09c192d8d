"""APIs shaped like other memory libraries', thin over :class:`memsif_lite.Memory`, so that moving
an application to memsif is an import change. Nothing here is imported by ``import memsif_lite``.

- :mod:`memsif_lite.compat.mem0` — ``Memory`` with mem0's ``add`` / ``search`` / ``get_all`` /
  ``get`` / ``update`` / ``delete`` / ``delete_all`` / ``history`` and their dict shapes, over one
  memory file per user / agent (:mod:`memsif_lite.homes`), and ``import_mem0`` for mem0's JSON
  export (``memsif import-mem0``; :mod:`.mem0_import`); the mapping itself is :mod:`.mem0_model`.
  docs/mem0.md.
"""
