"""The elimination plan: buckets, mini-buckets, table sizes and memory, and its picture."""
