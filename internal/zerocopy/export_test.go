package zerocopy

// NoMap makes r read instead of map, as it does where mapping fails.
func NoMap(r *Region) { r.noMap = true }
