"""Everything that talks to Redis: key names, record codecs, Lua scripts, reads and commits."""
