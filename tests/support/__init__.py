"""Support code the tests share (not tests themselves, and not shipped in the wheel):
the program grammar of the differential tester (`tests.support.grammar`), the
reproducers its campaigns found (`tests.support.reproducers`), a tiny transformers audio
encoder config (`audio_encoders`) and modules on packed sources (`packed_sources`)."""
