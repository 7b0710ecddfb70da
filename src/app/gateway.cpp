// placeholder; replaced by the room's implementation
