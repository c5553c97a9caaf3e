:"storage"._idem_canonical_value(request, 1)
