"""What a map leaves behind: its run record, the timeline plot and the efficiency figures."""
