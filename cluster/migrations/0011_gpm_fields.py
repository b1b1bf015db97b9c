"""The NVML GPM fields (issue 16): samples gain them, minute and hour rollups their means and gpm_covered_s.

Every column is added without a table rewrite, whatever the tables hold: the sample columns are nullable
with no default, and gpm_covered_s has a constant default (PostgreSQL 11+ stores it in the catalog), kept
as the column's default so rows written in raw SQL without it still insert.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('cluster', '0010_teams_app'),
    ]

    operations = [
        migrations.AddField(
            model_name='hourrollup',
            name='dram_active_mean',
            field=models.FloatField(help_text='Mean DRAM bandwidth used (percent of peak).', null=True),
        ),
        migrations.AddField(
            model_name='hourrollup',
            name='fp16_active_mean',
            field=models.FloatField(help_text='Mean FP16 pipe activity (percent).', null=True),
        ),
        migrations.AddField(
            model_name='hourrollup',
            name='fp32_active_mean',
            field=models.FloatField(help_text='Mean FP32 pipe activity (percent).', null=True),
        ),
        migrations.AddField(
            model_name='hourrollup',
            name='fp64_active_mean',
            field=models.FloatField(help_text='Mean FP64 pipe activity (percent).', null=True),
        ),
        migrations.AddField(
            model_name='hourrollup',
            name='gpm_covered_s',
            field=models.IntegerField(db_default=0, default=0, help_text='Seconds covered by records with an SM activity (GPM).'),
        ),
        migrations.AddField(
            model_name='hourrollup',
            name='nvlink_rx_mibs_mean',
            field=models.FloatField(help_text='Mean NVLink received (MiB/s).', null=True),
        ),
        migrations.AddField(
            model_name='hourrollup',
            name='nvlink_tx_mibs_mean',
            field=models.FloatField(help_text='Mean NVLink sent (MiB/s).', null=True),
        ),
        migrations.AddField(
            model_name='hourrollup',
            name='pcie_rx_mibs_mean',
            field=models.FloatField(help_text='Mean PCIe received (MiB/s).', null=True),
        ),
        migrations.AddField(
            model_name='hourrollup',
            name='pcie_tx_mibs_mean',
            field=models.FloatField(help_text='Mean PCIe sent (MiB/s).', null=True),
        ),
        migrations.AddField(
            model_name='hourrollup',
            name='sm_active_mean',
            field=models.FloatField(help_text='Mean SM activity (percent).', null=True),
        ),
        migrations.AddField(
            model_name='hourrollup',
            name='sm_occupancy_mean',
            field=models.FloatField(help_text='Mean SM occupancy (percent).', null=True),
        ),
        migrations.AddField(
            model_name='hourrollup',
            name='tensor_active_mean',
            field=models.FloatField(help_text='Mean tensor pipe activity (percent).', null=True),
        ),
        migrations.AddField(
            model_name='minuterollup',
            name='dram_active_mean',
            field=models.FloatField(help_text='Mean DRAM bandwidth used (percent of peak).', null=True),
        ),
        migrations.AddField(
            model_name='minuterollup',
            name='fp16_active_mean',
            field=models.FloatField(help_text='Mean FP16 pipe activity (percent).', null=True),
        ),
        migrations.AddField(
            model_name='minuterollup',
            name='fp32_active_mean',
            field=models.FloatField(help_text='Mean FP32 pipe activity (percent).', null=True),
        ),
        migrations.AddField(
            model_name='minuterollup',
            name='fp64_active_mean',
            field=models.FloatField(help_text='Mean FP64 pipe activity (percent).', null=True),
        ),
        migrations.AddField(
            model_name='minuterollup',
            name='gpm_covered_s',
            field=models.IntegerField(db_default=0, default=0, help_text='Seconds covered by records with an SM activity (GPM).'),
        ),
        migrations.AddField(
            model_name='minuterollup',
            name='nvlink_rx_mibs_mean',
            field=models.FloatField(help_text='Mean NVLink received (MiB/s).', null=True),
        ),
        migrations.AddField(
            model_name='minuterollup',
            name='nvlink_tx_mibs_mean',
            field=models.FloatField(help_text='Mean NVLink sent (MiB/s).', null=True),
        ),
        migrations.AddField(
            model_name='minuterollup',
            name='pcie_rx_mibs_mean',
            field=models.FloatField(help_text='Mean PCIe received (MiB/s).', null=True),
        ),
        migrations.AddField(
            model_name='minuterollup',
            name='pcie_tx_mibs_mean',
            field=models.FloatField(help_text='Mean PCIe sent (MiB/s).', null=True),
        ),
        migrations.AddField(
            model_name='minuterollup',
            name='sm_active_mean',
            field=models.FloatField(help_text='Mean SM activity (percent).', null=True),
        ),
        migrations.AddField(
            model_name='minuterollup',
            name='sm_occupancy_mean',
            field=models.FloatField(help_text='Mean SM occupancy (percent).', null=True),
        ),
        migrations.AddField(
            model_name='minuterollup',
            name='tensor_active_mean',
            field=models.FloatField(help_text='Mean tensor pipe activity (percent).', null=True),
        ),
        migrations.AddField(
            model_name='sample',
            name='dram_active',
            field=models.FloatField(null=True),
        ),
        migrations.AddField(
            model_name='sample',
            name='fp16_active',
            field=models.FloatField(null=True),
        ),
        migrations.AddField(
            model_name='sample',
            name='fp32_active',
            field=models.FloatField(null=True),
        ),
        migrations.AddField(
            model_name='sample',
            name='fp64_active',
            field=models.FloatField(null=True),
        ),
        migrations.AddField(
            model_name='sample',
            name='nvlink_rx_mibs',
            field=models.FloatField(null=True),
        ),
        migrations.AddField(
            model_name='sample',
            name='nvlink_tx_mibs',
            field=models.FloatField(null=True),
        ),
        migrations.AddField(
            model_name='sample',
            name='pcie_rx_mibs',
            field=models.FloatField(null=True),
        ),
        migrations.AddField(
            model_name='sample',
            name='pcie_tx_mibs',
            field=models.FloatField(null=True),
        ),
        migrations.AddField(
            model_name='sample',
            name='sm_active',
            field=models.FloatField(null=True),
        ),
        migrations.AddField(
            model_name='sample',
            name='sm_occupancy',
            field=models.FloatField(null=True),
        ),
        migrations.AddField(
            model_name='sample',
            name='tensor_active',
            field=models.FloatField(null=True),
        ),
    ]
