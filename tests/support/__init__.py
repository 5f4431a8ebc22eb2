"""Support code the tests share (not tests themselves, and not shipped in the wheel):
the program grammar of the differential tester (`tests.support.grammar`) and the
reproducers its campaigns found (`tests.support.reproducers`)."""
