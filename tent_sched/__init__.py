"""Deadline scheduling for TENT: MLU predictor, admission queue, bandwidth meters, arbitration."""
