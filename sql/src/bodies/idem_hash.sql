:"storage"._idem_hash(request)
