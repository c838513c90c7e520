"""The log's grammar, which the runtime writes and the reader reads, so that it belongs to neither
room: each line kind's writer beside its parser. Standard library only, nothing looked at, read or
written here: text in, text or typed values out."""
