"""Who is asking: the lab secret and signatures (identity), login files, Unix-socket peer credentials."""
