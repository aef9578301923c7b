"""txmq wire and disk formats: pure codecs shared by the store and its clients."""
